"""The hang watchdog on fed times: when it writes, when it never does, and its thread's life with the engine."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from torch import nn

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.hang.watchdog import (
    ASIDE_FACTOR,
    FLOOR_S,
    MEDIANS,
    OWN_CODE,
    HangWatch,
    Progress,
    engine_probe,
)
from perf_callbacks.exceptions import PerfConfigError
from tests.core.engine_helpers import make_engine, run_steps
from tests.core.hang.hang_ranks import report_json


class Fed:
    """A probe whose progress the test sets."""

    def __init__(self) -> None:
        self.state = Progress(steps_run=0, step=0, phase="forward", aside=None)

    def __call__(self) -> Progress:
        return self.state

    def step(self) -> None:
        n = self.state.steps_run + 1
        self.state = Progress(n, n, "forward", None)


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "perf-callbacks-hang-watch"]


def test_it_writes_once_after_the_timeout_and_again_after_steps_resume(tmp_path: Path) -> None:
    fed = Fed()
    watch = HangWatch(fed, tmp_path, rank=3, timeout=10.0)
    assert watch.check(0.0) is None
    assert watch.check(9.9) is None
    folder = watch.check(10.5)
    assert folder == tmp_path / "hang-rank3"
    data = json.loads((folder / "hang.json").read_text())
    assert (data["rank"], data["step"], data["phase"], data["waited_s"]) == (3, 0, "forward", 10.5)
    training = data["threads"][0]
    assert training["training"] and training["id"] == threading.get_ident()
    here = [
        f
        for f in training["frames"]
        if f["function"] == "test_it_writes_once_after_the_timeout_and_again_after_steps_resume"
    ]
    assert len(here) == 1 and not here[0]["library"] and here[0]["file"] == __file__
    assert f"line {here[0]['line']} in test_it_writes_once" in (folder / "stacks.txt").read_text()  # faulthandler's
    (folder / "hang.json").write_text(json.dumps({**data, "marker": 1}))
    assert watch.check(30.0) is None  # once per hang
    assert json.loads((folder / "hang.json").read_text())["marker"] == 1
    fed.step()
    assert watch.check(40.0) is None  # steps resumed: a stall, and the folder says so
    assert json.loads((folder / "hang.json").read_text())["resumed"] == {"steps_run": 1, "after_s": 29.5}
    assert watch.check(49.0) is None
    assert watch.check(51.0) == folder  # re-armed: the next hang writes again
    assert json.loads((folder / "hang.json").read_text())["resumed"] is None


def test_steps_that_keep_completing_never_write(tmp_path: Path) -> None:
    fed = Fed()
    watch = HangWatch(fed, tmp_path, rank=0, timeout=1.0)
    for i in range(100):  # each step takes 0.9 s: slow, but progressing
        assert watch.check(i * 0.9) is None
        fed.step()
    assert not (tmp_path / "hang-rank0").exists()


def test_nothing_is_watched_before_the_first_step_begins(tmp_path: Path) -> None:
    fed = Fed()
    fed.state = Progress(0, None, None, None)
    watch = HangWatch(fed, tmp_path, rank=0, timeout=1.0)
    assert [watch.check(t) for t in (0.0, 100.0, 1000.0)] == [None, None, None]


@pytest.mark.parametrize("aside", ["validation", "checkpoint", "between steps"])
def test_time_set_aside_gets_ten_times_the_timeout_and_does_not_count_after(tmp_path: Path, aside: str) -> None:
    fed = Fed()
    watch = HangWatch(fed, tmp_path, rank=0, timeout=10.0)
    watch.check(0.0)
    fed.state = fed.state._replace(aside=aside, phase="validation" if aside == "validation" else "framework")
    for t in range(5, 10 * ASIDE_FACTOR, 5):  # a long validation, 9.5x the timeout: never a hang
        assert watch.check(float(t)) is None, t
    fed.state = fed.state._replace(aside=None, phase="forward")
    assert watch.check(100.0) is None
    assert watch.check(109.0) is None  # the aside's time does not count against the step after it
    assert not (tmp_path / "hang-rank0").exists()
    fed.state = fed.state._replace(aside=aside)
    watch.check(110.0)
    assert watch.check(110.0 + 10.0 * ASIDE_FACTOR + 1.0) is not None  # an aside that never ends is one too
    assert json.loads((tmp_path / "hang-rank0" / "hang.json").read_text())["aside"] == aside


class Checks(nn.Module):
    """A module whose forward is the watchdog's poll: the training thread (this test's) is inside a module's call."""

    def __init__(self, watch: HangWatch) -> None:
        super().__init__()
        self.watch = watch

    def forward(self, now: float) -> Path | None:
        return self.watch.check(now)


def test_where_code_may_be_the_forward_the_stack_tells_the_users_code_from_a_training_forward(tmp_path: Path) -> None:
    fed = Fed()
    fed.state = fed.state._replace(maybe_own=True)  # Accelerate: from the batch's hand-over to its first phase
    watch = HangWatch(fed, tmp_path, rank=0, timeout=10.0)
    module = Checks(watch)
    watch.check(0.0)
    assert watch.check(11.0) is None  # past the timeout in no module: the user's own code, 10x from here
    assert module.eval()(60.0) is None  # a module in eval mode: the user's evaluation
    assert module.train()(105.0) is None  # the step's forward begins: the own time ends, the timeout counts again
    assert module(116.0) == tmp_path / "hang-rank0"  # a forward that stalls is written at 1x
    assert json.loads((tmp_path / "hang-rank0" / "hang.json").read_text())["aside"] is None
    watch = HangWatch(fed, tmp_path / "own", rank=0, timeout=10.0)
    watch.check(0.0)
    assert [watch.check(t) for t in (11.0, 50.0, 110.0)] == [None, None, None]
    assert watch.check(112.0) is not None  # own code that never ends is written after 10x too
    assert json.loads((tmp_path / "own" / "hang-rank0" / "hang.json").read_text())["aside"] == OWN_CODE


def test_the_default_timeout_is_the_floor_or_many_medians(tmp_path: Path) -> None:
    fed = Fed()
    watch = HangWatch(fed, tmp_path, rank=0, timeout=None)
    assert watch.limit == FLOOR_S
    t = 0.0
    for _ in range(10):  # 60 s steps: 20 medians is 1200 s
        watch.check(t)
        fed.step()
        t += 60.0
    watch.check(t)
    assert watch.limit == pytest.approx(MEDIANS * 60.0)
    assert watch.check(t + 1100.0) is None
    assert watch.check(t + 1300.0) is not None


def test_a_long_validation_of_a_real_engine_is_no_hang(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, hang_timeout=0)  # no thread: the test feeds the times
    watch = HangWatch(engine_probe(engine), tmp_path, rank=0, timeout=5.0)
    run_steps(engine, 3)
    engine.data_start()
    engine.data_end()
    engine.batch_start(3)
    assert watch.check(0.0) is None
    engine.validation_start()
    assert [watch.check(t) for t in (10.0, 20.0, 40.0)] == [None, None, None]  # 8x the timeout
    engine.validation_end()
    assert watch.check(44.0) is None
    engine.checkpoint_start()
    assert watch.check(80.0) is None
    engine.checkpoint_end()
    engine.phase("backward")
    assert watch.check(84.0) is None
    assert not (tmp_path / "hang-rank0").exists()
    assert watch.check(90.0) is not None  # a step that then stops for the timeout is a hang
    data = json.loads((tmp_path / "hang-rank0" / "hang.json").read_text())
    assert (data["step"], data["phase"], data["aside"]) == (3, "backward", None)


def test_a_fetch_that_found_no_batch_is_between_steps_a_fetch_that_waits_is_not(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, hang_timeout=0)
    probe = engine_probe(engine)
    run_steps(engine, 3)
    assert probe().aside == "between steps"  # the step ended: the loop's own code runs
    engine.data_start()
    assert probe() == (3, 3, "data_wait", None, False)  # waiting for the loader is in the step: a stopped loader is a hang
    engine.data_end()  # StopIteration: the loop is over (or an epoch ends)
    assert probe().aside == "between steps"
    engine.batch_start(3)
    assert probe().aside is None
    engine.close()
    engine.close()


@pytest.mark.parametrize(("steps_run", "clean", "resumed"), [(0, True, True), (1, False, True), (0, False, False)])
def test_close_says_a_stall_ended_unless_an_exception_ends_a_run_that_never_stepped_again(
    tmp_path: Path, steps_run: int, clean: bool, resumed: bool
) -> None:
    watch = HangWatch(Fed(), tmp_path, rank=0, timeout=10.0)
    watch.check(0.0)
    assert watch.check(11.0) is not None  # no poll sees the end: the run closes first
    watch.close(steps_run, clean)
    data = json.loads((tmp_path / "hang-rank0" / "hang.json").read_text())
    assert (data["resumed"] is not None) is resumed
    if resumed:
        assert data["resumed"]["steps_run"] == steps_run


def test_a_stall_that_ends_right_before_a_clean_close_is_reported_as_a_stall(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = make_engine(tmp_path, hang_timeout=0.2)  # polled every 0.02 s
    run_steps(engine, 2)
    engine.data_start()
    time.sleep(0.6)  # the loader stalls, then runs out; the run closes at once, before the next poll
    engine.data_end()
    engine.close()
    data = json.loads((tmp_path / "run" / "hang-rank0" / "hang.json").read_text())
    assert (data["phase"], data["resumed"]["steps_run"]) == ("data_wait", 2)
    hang = report_json(tmp_path, capsys)["hang"]
    assert hang["summary"] == ["rank 0 resumed 0 s after it wrote: a stall, not a hang"]


def test_the_engine_starts_the_thread_and_close_stops_it_leaving_no_folder(tmp_path: Path) -> None:
    # This engine's own thread, not a count of all of them: the threads of earlier tests' engines end on their own
    # once those engines are collected, at any moment (a count taken around that moment was off by one on CI).
    engine = make_engine(tmp_path, hang_timeout=30)
    assert engine.hang is not None and (thread := engine.hang._thread) is not None and thread.daemon
    assert thread in watch_threads() and thread.is_alive()
    run_steps(engine, 3)
    assert thread.is_alive()  # steps that complete leave it watching
    engine.close()
    assert not thread.is_alive()  # close stopped it (stop() joins it)
    assert not list(tmp_path.rglob("hang-rank*"))


def test_hang_timeout_zero_starts_no_thread(tmp_path: Path) -> None:
    before = set(watch_threads())
    engine = make_engine(tmp_path, hang_timeout=0)
    assert engine.hang is None and not set(watch_threads()) - before  # no new thread (earlier ones may end meanwhile)
    engine.close()


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "5", True])
def test_a_bad_hang_timeout_fails_at_construction(bad: object) -> None:
    with pytest.raises(PerfConfigError, match="hang_timeout"):
        PerfConfig(hang_timeout=bad)  # type: ignore[arg-type]


def test_a_failing_write_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "run"
    blocker.write_text("a file where the run folder should be")
    watch = HangWatch(Fed(), blocker, rank=0, timeout=1.0)
    watch.check(0.0)
    assert watch.check(2.0) is not None  # it tried, logged, and goes on


def test_the_cost_benchmark_runs() -> None:
    import runpy

    bench = runpy.run_path(str(Path(__file__).parents[3] / "benchmarks" / "hang_watch.py"))
    result = bench["main"](["--steps", "200", "--rounds", "1"])
    assert set(result) == {"off", "default", "1 s"} and all(r["best_us"] > 0 for r in result.values())

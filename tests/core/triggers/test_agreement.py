"""One agreed step for a request on every rank (``core/triggers/agreement.py``): the protocol with fake steps and
clocks, the remote store on moto's S3, and real gloo ranks whose steps run at different speeds."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from perf_callbacks.config import PerfConfig, ScheduleConfig
from perf_callbacks.core.triggers.agreement import MAX_RAISES, MIN_MARGIN, Agreement, AgreementStore, Ranks, margin
from perf_callbacks.core.triggers.captures import CaptureSchedule
from perf_callbacks.core.triggers.request_files import REQUEST_FILE, LazyFs
from perf_callbacks.core.triggers.requests import CaptureRequests
from perf_callbacks.core.triggers.schedule import Schedule
from perf_callbacks.exceptions import PerfConfigError
from tests.core.triggers.capture_ranks import ASK_AT, SIGNAL_AT, SLOW, STEPS, run_ranks
from tests.s3_server import S3Server, s3_fixture  # noqa: F401 - the fixture


class Rank:
    """One rank's side, by hand: its open step, a fake clock, its schedule and its agreement (poll 0.1 s)."""

    def __init__(self, store: AgreementStore, step: int, rank: int = 0) -> None:
        self.step, self.t = step, 0.0
        self.schedule = CaptureSchedule(Schedule(ScheduleConfig(skip_first=10_000)))
        self.agreement = Agreement(store, self.schedule, lambda: self.step, 0.1, rank, clock=lambda: self.t)

    def run(self, steps: int, per_s: float) -> None:
        """``steps`` steps at ``per_s`` steps a second, the request thread looking at each."""
        for _ in range(steps):
            self.step, self.t = self.step + 1, self.t + 1 / per_s
            self.agreement.note()

    def planned(self) -> tuple[int, int] | None:
        """The window this rank plans once its next step begins."""
        self.schedule.action(self.step + 1)
        plan = self.schedule.plan
        return None if plan is None else (plan.first, plan.last)


def test_the_first_proposal_wins_and_a_rank_that_sees_the_request_later_adopts_it(tmp_path: Path) -> None:
    store = AgreementStore(tmp_path)
    first, late = Rank(store, 90, rank=1), Rank(store, 89, rank=0)
    first.run(10, per_s=50.0)  # at step 100, 50 steps a second: 3 polls of 0.1 s are 15 steps
    first.agreement.serve("r1", 2)
    late.run(12, per_s=50.0)  # sees it a poll later, at step 101
    late.agreement.serve("r1", 2)
    agreed = 101 + MIN_MARGIN + 15
    assert first.planned() == late.planned() == (agreed, agreed + 1)
    assert json.loads((tmp_path / "capture-r1.json").read_text())["at_step"] == agreed
    assert json.loads((tmp_path / "capture-r1.json").read_text())["rank"] == 1


def test_a_rank_past_the_agreed_step_raises_it_and_the_others_follow(tmp_path: Path) -> None:
    store = AgreementStore(tmp_path)
    slow, fast = Rank(store, 20), Rank(store, 100, rank=1)
    slow.agreement.serve("r1", None)  # no rate yet: its next step and MIN_MARGIN
    assert slow.planned() == (21 + MIN_MARGIN, 21 + MIN_MARGIN + 2)  # schedule.active (3) steps
    fast.agreement.serve("r1", None)  # at step 100: past 23, raises to 101 + 2
    assert store.read("r1") == 103 and fast.planned() == (103, 105)
    slow.agreement.recheck(set())  # its next look: its window has not begun, it follows
    assert slow.planned() == (103, 105)
    begun = Rank(store, 103)  # a rank whose window began keeps it, whatever is agreed since
    begun.schedule.request("file", "r1", None, at=103)
    begun.schedule.action(103)
    store.replace("r1", 200, rank=1)
    begun.agreement.following["r1"] = (103, None, 0)
    begun.agreement.recheck(set())
    assert begun.schedule.plan is not None and begun.schedule.plan.first == 103 and not begun.agreement.following


def test_a_rank_that_cannot_catch_up_drops_its_window_with_one_line(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="perf_callbacks")
    store = AgreementStore(tmp_path)
    rank = Rank(store, 100)
    store.create("r1", 5, rank=1)
    rank.agreement.serve("r1", 2)  # its first raise
    for _ in range(MAX_RAISES):  # another rank keeps writing a step long gone
        assert rank.planned() is not None
        store.replace("r1", 5, rank=1)
        rank.agreement.recheck(set())
    assert rank.planned() is None and not rank.agreement.following
    assert caplog.text.count("raised to 103") == MAX_RAISES
    assert "the ranks agreed on step 5 and this rank is at step 101: no window on this rank" in caplog.text


def test_a_folder_that_cannot_be_written_falls_back_to_the_ranks_own_step(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "file").write_text("")
    rank = Rank(AgreementStore(tmp_path / "file" / "run"), 40)
    with caplog.at_level(logging.INFO, logger="perf_callbacks"):
        rank.agreement.serve("r1", 2)
    assert rank.planned() == (41 + MIN_MARGIN, 42 + MIN_MARGIN)
    assert "could not be read or written" in caplog.text


def test_the_margin_is_three_polls_of_steps() -> None:
    assert margin(None, 2.0) == MIN_MARGIN and margin(0.1, 2.0) == MIN_MARGIN + 1
    assert margin(100.0, 2.0) == MIN_MARGIN + 600


def test_a_remote_agreement_is_created_once(s3: S3Server) -> None:
    s3.fs().mkdir("perf-agree")
    far = LazyFs("s3://perf-agree/perf", s3.options)
    one, two = AgreementStore(None, far, "run-a"), AgreementStore(None, far, "run-a")
    assert one.create("r1", 120, rank=0) and not two.create("r1", 150, rank=1)
    assert two.read("r1") == 120 and s3.fs().exists("perf-agree/perf/run-a/capture-r1.json")


def test_the_signal_for_all_ranks_is_a_request_both_ranks_serve_at_one_step(tmp_path: Path) -> None:
    """Two ranks' request sources in one process, one run folder: the signal on rank 1 (its handler called as the
    signal would) becomes a request file in the run's folder, and both plan the same step."""
    run_dir, pair = tmp_path / "run", []
    for rank, step in ((0, 60), (1, 15)):
        schedule = CaptureSchedule(Schedule(ScheduleConfig(skip_first=10_000)))
        ranks = Ranks(2, run_dir, lambda step=step: step, all_ranks=True)
        pair.append(CaptureRequests("SIGUSR2", 0.02, [tmp_path, run_dir], None, None, schedule, "run", rank, ranks))
    for requests in pair:
        assert requests.files is not None
        requests.files.start()
    try:
        time.sleep(0.1)  # both first looks: whatever is there is old
        assert pair[1].signal is not None
        pair[1].signal.handle()  # no I/O here: the thread writes the request
        deadline = time.monotonic() + 10
        while not all(r.files and r.files.agreement and r.files.agreement.following for r in pair):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.1)  # a look or two more: a raise has been followed
        steps = [r.files.agreement.following["".join(r.files.agreement.following)][0] for r in pair if r.files
                 and r.files.agreement]
    finally:
        for requests in pair:
            requests.close()
    assert (run_dir / REQUEST_FILE).is_file() and steps[0] == steps[1] >= 61


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"capture_signal_all_ranks": True, "capture_poll_s": 0}, "capture_signal_all_ranks: true needs capture_signal"),
        ({"capture_signal_all_ranks": True, "capture_signal": None}, r"needs capture_signal \(got None\)"),
        ({"capture_signal_all_ranks": "yes"}, "capture_signal_all_ranks must be bool"),
    ],
)
def test_the_signal_for_all_ranks_needs_a_signal_and_request_files(options: dict[str, object], message: str) -> None:
    with pytest.raises(PerfConfigError, match=message):
        PerfConfig.from_dict(options)
    assert PerfConfig.from_dict({"capture_signal_all_ranks": True}).capture_signal_all_ranks


@pytest.mark.multiprocess
@pytest.mark.parametrize("how", ["cli", "signal"])
def test_both_gloo_ranks_record_the_same_steps_though_one_runs_four_times_slower(tmp_path: Path, how: str) -> None:
    """No collective between steps: when rank 0 (at its step ~40) or rank 1 (~10) asks, the ranks are ~30 steps
    apart; both record the same window, after the asking rank's step, within the run."""
    outcomes = run_ranks(tmp_path, how)
    windows = [outcomes[r]["windows"] for r in (0, 1)]
    assert len(windows[0]) == 1 and windows[0] == windows[1], windows
    first = int(windows[0][0].split("-")[1])
    assert (ASK_AT if how == "cli" else SIGNAL_AT * SLOW) < first < STEPS - 2


@pytest.mark.multiprocess
def test_a_dead_rank_never_holds_the_other(tmp_path: Path) -> None:
    """Rank 1 joins and exits before training: rank 0 asks alone, records its window and runs to its end."""
    outcomes = run_ranks(tmp_path, "dead")
    assert list(outcomes) == [0] and outcomes[0]["last"] == STEPS - 1 and len(outcomes[0]["windows"]) == 1

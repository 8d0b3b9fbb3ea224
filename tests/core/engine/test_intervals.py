"""The logging interval's time floor (``log_min_interval_s``): a fast loop logs every few multiples of
``log_every_n_steps``, a slow one at every multiple, and the memory held is read at the start of logged steps only."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.exceptions import PerfConfigError
from tests.core.engine_helpers import SCHEDULE, run_steps


def engine_with_floor(tmp_path: Path, logged: list, floor: float, every: int = 5) -> PerfEngine:
    cfg = PerfConfig.from_dict({"schedule": {**SCHEDULE, "skip_first": 10**6}, "summary": False})
    ctx = RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=every, log_min_interval_s=floor,
                     log_metrics=lambda m, s: logged.append((s, m)))
    return PerfEngine(cfg, ctx)


@pytest.mark.parametrize(
    ("pace_s", "floor", "due"),
    [
        (0.001, 0.5, 100 + 50 * 10),  # 50 ms an interval: the tenth multiple lasts 0.5 s
        (0.0011, 0.5, 100 + 50 * 10),  # 55 ms: ceil(9.09) = 10
        (0.0009, 0.5, 100 + 50 * 12),  # 45 ms: ceil(11.1) = 12
        (0.02, 0.5, 100 + 50),  # 1 s an interval: every multiple
        (0.001, 0.0, 100 + 50),  # no floor
    ],
)
def test_the_next_logged_interval_is_the_first_multiple_that_lasts_the_floor(
        tmp_path: Path, pace_s: float, floor: float, due: int) -> None:
    intervals = engine_with_floor(tmp_path, [], floor, every=50).intervals
    assert intervals.next_due(50, 10.0) == 100  # no pace yet: the next multiple
    assert intervals.next_due(100, 10.0 + 50 * pace_s) == due


def test_a_clock_that_did_not_move_or_a_count_that_went_back_logs_at_the_next_multiple(tmp_path: Path) -> None:
    intervals = engine_with_floor(tmp_path, [], 0.5, every=50).intervals
    intervals.next_due(50, 10.0)
    assert intervals.next_due(100, 10.0) == 150
    assert intervals.next_due(50, 11.0) == 100  # a resumed count below the last one


def test_a_fast_loop_logs_the_first_two_intervals_then_waits_for_the_floor(tmp_path: Path) -> None:
    """Without the floor, an interval every 5 steps; with an hour, the first two only (the first sets the pace)."""
    logged: list = []
    engine = engine_with_floor(tmp_path, logged, 3600.0)
    run_steps(engine, 41)
    assert [s for s, _ in logged] == [5, 10]
    assert engine.intervals.due > 10**6 and engine.intervals.held_at == engine.intervals.due - 1
    engine.close()

    unfloored: list = []
    engine = engine_with_floor(tmp_path / "none", unfloored, 0.0)
    run_steps(engine, 41)
    assert [s for s, _ in unfloored] == [5, 10, 15, 20, 25, 30, 35, 40]
    engine.close()


def test_a_loop_slower_than_the_floor_logs_at_every_multiple(tmp_path: Path) -> None:
    """Each step sleeps 20 ms, so 5 steps last at least 100 ms: a 50 ms floor never widens the interval."""
    logged: list = []
    engine = engine_with_floor(tmp_path, logged, 0.05)
    for step in range(21):
        engine.data_start()
        engine.data_end()
        engine.batch_start(step)
        time.sleep(0.02)
        engine.batch_end(stepped=True, samples=8)
    engine.close()
    assert [s for s, _ in logged] == [5, 10, 15, 20]
    assert all(m["perf/train/step_time_ms"] >= 20 for _, m in logged)


def test_a_loop_that_slows_down_logs_once_the_floor_has_passed(tmp_path: Path) -> None:
    """Floor 0.3 s, 5 steps an interval. Steps 0-14 are fast: after the interval logged at 10 the pace says "wait
    hundreds of multiples". Then each step sleeps 70 ms: at 20 the floor has passed (5 steps >= 350 ms), so the
    next multiple is due and logs at 25, after its start's memory was read; its interval covers steps 10-24."""
    logged: list = []
    engine = engine_with_floor(tmp_path, logged, 0.3)
    held: list[int] = []
    read = engine.intervals.read_held
    engine.intervals.read_held = lambda step: (held.append(step), read(step))  # type: ignore[method-assign]
    for step in range(40):
        engine.data_start()
        engine.data_end()
        engine.batch_start(step)
        if step >= 15:
            time.sleep(0.07)
        engine.batch_end(stepped=True, samples=8)
    engine.close()
    steps = [s for s, _ in logged]
    assert steps[:3] == [5, 10, 25] and all(s % 5 == 0 for s in steps) and steps[-1] >= 35
    assert held == [s - 1 for s in steps]  # the start of each logged step, and no other
    assert logged[2][1]["perf/train/step_time_ms"] >= 70  # 10 of its 15 steps slept: the median is a slow one


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "1s"])
def test_the_floor_must_be_a_number_of_seconds(bad: object) -> None:
    with pytest.raises(PerfConfigError, match="log_min_interval_s"):
        PerfConfig.from_dict({"log_min_interval_s": bad})


def test_the_default_floor_is_half_a_second() -> None:
    assert PerfConfig().log_min_interval_s == 0.5
    assert RunContext(output_dir=Path("."), run_name="r").log_min_interval_s == 0.0  # the engine's own: none

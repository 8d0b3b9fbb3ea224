"""``perf/ledger/*`` on a fed clock: each interval's wall time by part, from what the engine holds at logging steps."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from perf_callbacks.core.engine.engine import PerfEngine
from tests.core.engine_helpers import FakeClock, make_engine

WAIT, WORK, AFTER, CKPT, VAL = 0.01, 0.09, 0.05, 0.2, 0.5  # seconds, fed


def steps(engine: PerfEngine, clock: FakeClock, n: int, val_at: int) -> None:
    """Each step: a fetch, its work, a checkpoint save and the framework's work after it; validation after ``val_at``."""
    for step in range(n):
        engine.data_start()
        clock.t += WAIT
        engine.data_end()
        engine.batch_start(step)
        clock.t += WORK
        engine.batch_end(stepped=True, samples=10)
        engine.checkpoint_start()
        clock.t += CKPT
        engine.checkpoint_end()
        if step == val_at:
            engine.validation_start()
            clock.t += VAL
            engine.validation_end()
        clock.t += AFTER


def test_each_interval_is_split_by_part_and_adds_up_to_one(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 10_000}, data_wait_steps=1000)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        steps(engine, clock, 15, val_at=12)
    engine.close()
    by_step = {s: {k.removeprefix("perf/ledger/"): v for k, v in m.items() if k.startswith("perf/ledger/")}
               for s, m in logged}
    assert sorted(by_step) == [5, 10, 15]
    step_s = WAIT + WORK + CKPT + AFTER
    # steps 0-4 to step 4's optimizer step: its checkpoint and the rest of it fall in the next interval
    first = 5 * (WAIT + WORK) + 4 * (CKPT + AFTER)
    assert by_step[5] == pytest.approx({"productive": (5 * WORK + 4 * AFTER) / first, "data_wait": 5 * WAIT / first,
                                        "checkpoint": 4 * CKPT / first, "own": 0.0, "other": 0.0})
    assert by_step[10] == pytest.approx({"productive": 5 * (WORK + AFTER) / (5 * step_s),
                                         "data_wait": WAIT / step_s, "checkpoint": CKPT / step_s,
                                         "own": 0.0, "other": 0.0})
    third = 5 * step_s + VAL  # validation after step 12: from then on, every interval logs its share
    assert by_step[15] == pytest.approx({"productive": 5 * (WORK + AFTER) / third, "data_wait": 5 * WAIT / third,
                                         "checkpoint": 5 * CKPT / third, "evaluation": VAL / third,
                                         "own": 0.0, "other": 0.0})


def test_a_step_that_is_not_measured_is_the_rest(tmp_path: Path) -> None:
    """A profiled window's steps are not measured (slower, left out): their time is ``other``, never productive."""
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 6, "wait": 0, "warmup": 0, "active": 2},
                         data_wait_steps=1000)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        steps(engine, clock, 10, val_at=-1)
    engine.close()
    [second] = [m for s, m in logged if s == 10]
    step_s = WAIT + WORK + CKPT + AFTER
    assert second["perf/ledger/other"] == pytest.approx(2 * (WAIT + WORK + AFTER) / (5 * step_s))  # steps 6 and 7
    assert second["perf/ledger/checkpoint"] == pytest.approx(CKPT / step_s)  # their saves are still checkpoints
    assert sum(v for k, v in second.items() if k.startswith("perf/ledger/")) == pytest.approx(1.0)

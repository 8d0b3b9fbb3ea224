"""Step time and data wait of the open step, as the engine measures them on the clock readings the test feeds.

The engine keeps the open step's times in a ``StepClock`` and does the arithmetic in place on its hot path, so the
behaviours are checked through the engine's own calls (``data_start``/``data_end``/``batch_start``/``batch_end``) on
a fake ``time.perf_counter``: the logged interval and the clock's fields are the measurement.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from perf_callbacks.core.clock import StepClock
from perf_callbacks.core.engine.engine import PerfEngine
from tests.core.engine_helpers import FakeClock, make_engine


def _engine(tmp_path: Path, logged: list) -> PerfEngine:
    return make_engine(tmp_path, logged, schedule={"skip_first": 1000}, flops=False, memory=False,
                       data_wait_steps=1000)


def _step_ms(logged: list) -> list[float]:
    return [m["perf/train/step_time_ms"] for _, m in logged]


def test_a_fresh_clock_has_measured_nothing() -> None:
    clock = StepClock()
    assert (clock.t_begin, clock.wait, clock.aside, clock.loader_timed, clock.t_data) == (0.0, 0.0, 0.0, False, None)


def test_data_wait_sums_the_fetches_inside_the_loader(tmp_path: Path) -> None:
    """Two fetches of one step (two micro-batches) add up; an end without a start adds nothing."""
    logged: list = []
    engine, clock = _engine(tmp_path, logged), FakeClock()
    with mock.patch("time.perf_counter", clock):
        for step in range(5):  # logged at step 5 (log_every_n_steps=5)
            clock.t = 10.0 * step
            engine.data_start()
            clock.t += 0.25
            engine.data_end()
            clock.t += 0.75
            engine.data_end()  # a second end without a start adds nothing
            engine.batch_start(step)
            engine.batch_end(stepped=False)
            engine.data_start()
            clock.t += 0.5
            engine.data_end()
            engine.batch_start(step)
            clock.t += 1.5
            engine.batch_end(stepped=True)
        clock.t = 50.0
        engine.data_start()  # step 5 begins: step 4 is measured, then the interval is logged at its end
        engine.batch_start(5)
        engine.batch_end(stepped=True)
    engine.close()
    step_ms, wait = _step_ms(logged)[0], logged[0][1]["perf/train/data_wait_fraction"]
    assert step_ms == pytest.approx(10_000.0)  # each step lasts from its first fetch to the next step's
    assert wait == pytest.approx(0.75 / 10.0)  # 0.25 + 0.5 per step; the lone end's 0.75 s is not wait
    assert engine.clock.loader_timed


def test_a_fetch_before_the_steps_number_is_known_carries_its_wait(tmp_path: Path) -> None:
    """A fetch that starts after a step ended but before the adapter names the next step: the step begins at that
    fetch and keeps its wait; a step begun by its batch alone has no wait."""
    logged: list = []
    engine, clock = _engine(tmp_path, logged), FakeClock()
    with mock.patch("time.perf_counter", clock):
        engine.batch_start(0)
        clock.t = 1.0
        engine.batch_end(stepped=True)
        engine.state.expected = None  # the next step's number is not known yet
        clock.t = 2.0
        engine.data_start()
        clock.t = 2.5
        engine.data_end()
        assert engine.state.pending_t == 2.0
        clock.t = 3.0
        engine.batch_start(1)  # step 1 begins at its fetch (2.0), with its 0.5 s wait
        assert (engine.clock.t_begin, engine.clock.wait, engine.clock.aside) == (2.0, 0.5, 0.0)
        clock.t = 4.0
        engine.batch_end(stepped=True)
        clock.t = 5.0
        engine.batch_start(2)  # no fetch: the wait starts again at 0
        assert (engine.clock.t_begin, engine.clock.wait) == (5.0, 0.0)
    assert engine.clock.loader_timed  # stays true for the run
    engine.close()


def test_time_set_aside_is_not_step_time(tmp_path: Path) -> None:
    logged: list = []
    engine, clock = _engine(tmp_path, logged), FakeClock()
    with mock.patch("time.perf_counter", clock):
        for step in range(6):
            clock.t = 100.0 * step
            engine.batch_start(step)
            engine.clock.set_aside(1.0)  # e.g. a checkpoint save, then our own logging
            engine.clock.set_aside(0.5)
            assert engine.clock.aside == 1.5
            clock.t += 4.0
            engine.batch_end(stepped=True)
    engine.close()
    assert _step_ms(logged)[0] == pytest.approx(98_500.0)  # 100 s from step to step, less 1.5 s set aside


def test_a_step_time_is_never_negative(tmp_path: Path) -> None:
    """More time set aside than the step lasted (a reading taken before the aside was): 0, not a negative time."""
    logged: list = []
    engine, clock = _engine(tmp_path, logged), FakeClock()
    with mock.patch("time.perf_counter", clock):
        for step in range(6):
            clock.t = 1.0 * step
            engine.batch_start(step)
            engine.clock.set_aside(5.0)
            engine.batch_end(stepped=True)
    engine.close()
    assert _step_ms(logged)[0] == 0.0
    assert engine.state.last_elapsed == 0.0  # the last step's time at its optimizer step, too

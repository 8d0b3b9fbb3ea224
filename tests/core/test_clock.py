"""StepClock: step time and data wait of the open step, on readings the test hands in (no real clock)."""

from __future__ import annotations

import pytest

from perf_callbacks.core.clock import StepClock


def test_a_fresh_clock_has_measured_nothing() -> None:
    clock = StepClock()
    assert (clock.t_begin, clock.wait, clock.aside, clock.loader_timed) == (0.0, 0.0, 0.0, False)
    clock.data_end(3.0)  # no fetch was started: nothing to add
    assert (clock.wait, clock.loader_timed) == (0.0, False)
    assert clock.elapsed(5.0) == 5.0


def test_data_wait_sums_the_fetches_inside_the_loader() -> None:
    clock = StepClock()
    clock.begin(10.0)
    clock.data_start(10.0)
    clock.data_end(10.25)
    clock.data_end(11.0)  # a second end without a start adds nothing
    clock.data_start(12.0)
    clock.data_end(12.5)
    assert clock.wait == pytest.approx(0.75)
    assert clock.loader_timed
    assert clock.elapsed(13.0) == pytest.approx(3.0)


def test_begin_resets_the_step_unless_the_wait_is_carried() -> None:
    clock = StepClock()
    clock.begin(1.0)
    clock.data_start(1.0)
    clock.data_end(1.5)
    clock.set_aside(0.25)
    clock.begin(2.0, carry_wait=True)  # the fetch happened before the step's number was known
    assert (clock.t_begin, clock.wait, clock.aside) == (2.0, 0.5, 0.0)
    clock.begin(3.0)
    assert (clock.t_begin, clock.wait, clock.aside) == (3.0, 0.0, 0.0)
    assert clock.loader_timed  # stays true for the run


def test_time_set_aside_is_not_step_time() -> None:
    clock = StepClock()
    clock.begin(100.0)
    clock.set_aside(1.0)
    clock.set_aside(0.5)
    assert clock.aside == 1.5
    assert clock.elapsed(104.0) == pytest.approx(2.5)
    assert clock.elapsed(100.5) == 0.0  # never negative

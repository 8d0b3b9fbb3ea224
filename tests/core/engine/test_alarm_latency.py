"""How soon the slowdown alarm fires in a fast loop at the default logging floor (``log_min_interval_s=0.5``).

Fed clock, fed step times: 2 ms and 20 ms steps, the slowdown starting at each of ten phases of the logging interval.
The promise (docs/guarantees.md): once the baseline is set, a 1.5x slowdown is told within 3.6 s of its start, as soon
as its slow intervals add up to 3 s; a slowdown that ends before that is a hiccup and is not told.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from unittest import mock

import pytest

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.exceptions import PerformanceDegradationWarning
from tests.core.engine_helpers import FakeClock, fake_steps

FLOOR = PerfConfig.log_min_interval_s  # the default


def told_after(tmp_path: Path, step_s: float, slow_s: float, offset_steps: int) -> float | None:
    """Seconds from the slowdown's start to the warning (None: never told) in a loop logging every 5 steps."""
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 10**6}, "summary": False, "check_dataloaders": False})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=5,
                                        log_min_interval_s=FLOOR))
    clock, told = FakeClock(), None
    with mock.patch("time.perf_counter", clock), warnings.catch_warnings(record=True) as seen, \
            mock.patch.object(engine.monitor.cpu_wait, "interval", return_value=None):  # no wait for a CPU: fed times
        warnings.simplefilter("always")
        steps = int(6.0 / step_s) + offset_steps  # 6 s of normal steps: the baseline is set by then
        fake_steps(engine, clock, steps, wait=0.0, work=step_s)
        start = clock.t
        for slow in [True] * int(slow_s / (1.5 * step_s)) + [False] * int(6.0 / step_s):
            fake_steps(engine, clock, 1, wait=0.0, work=step_s * (1.5 if slow else 1.0), start=steps)
            steps += 1
            if told is None and any(issubclass(w.category, PerformanceDegradationWarning) for w in seen):
                told = clock.t - start
    engine.close()
    return told


@pytest.mark.parametrize("step_ms", [2.0, 20.0])
def test_a_slowdown_of_3_6_s_is_told_within_3_6_s_at_the_default_floor(tmp_path: Path, step_ms: float) -> None:
    step_s = step_ms / 1e3
    phases = range(0, int(FLOOR / step_s), max(1, int(FLOOR / step_s) // 10))  # where in an interval it starts
    told = [told_after(tmp_path / str(k), step_s, 3.6, k) for k in phases]
    assert all(t is not None and t <= 3.6 + 1e-6 for t in told), told


@pytest.mark.parametrize("step_ms", [2.0, 20.0])
def test_a_slowdown_of_2_5_s_is_a_hiccup_and_not_told(tmp_path: Path, step_ms: float) -> None:
    step_s = step_ms / 1e3
    told = [told_after(tmp_path / str(k), step_s, 2.5, k) for k in range(0, int(FLOOR / step_s), 7)]
    assert told == [None] * len(told), told

"""Step timing: step time, data-wait share and throughput per logging interval; the degradation baseline.

Pure arithmetic on numbers the engine hands in: ``update()`` per optimizer step, ``compute()`` and ``reset()`` per
logging interval, as in torchmetrics.

Example:
    >>> stats = StepStats()
    >>> for _ in range(4):
    ...     stats.update(step_time=0.10, data_wait=0.02, samples=32)
    >>> m = stats.compute()
    >>> round(m["train/step_time_ms"]), round(m["train/data_wait_fraction"], 2), round(m["train/samples_per_sec"])
    (100, 0.2, 320)
"""

from __future__ import annotations

import statistics

MIN_ACTIONABLE_WAIT_S = 1e-3


class StepStats:
    """Accumulates the optimizer steps of one logging interval (steps inside profiling windows are left out)."""

    def __init__(self) -> None:
        self.reset()

    def update(self, step_time: float, data_wait: float, samples: int | None) -> None:
        """Add one optimizer step (seconds)."""
        self.step_times.append(step_time)
        self.data_wait += data_wait
        if samples:
            self.samples += samples

    def compute(self) -> dict[str, float]:
        """Median step time, data-wait share and samples per second of the interval so far."""
        if not self.step_times:
            return {}
        total = sum(self.step_times)
        out = {
            "train/step_time_ms": statistics.median(self.step_times) * 1e3,
            "train/data_wait_fraction": self.data_wait / total if total > 0 else 0.0,
        }
        if self.samples and total > 0:
            out["train/samples_per_sec"] = self.samples / total
        return out

    def reset(self) -> None:
        """Start a new interval."""
        self.step_times: list[float] = []
        self.data_wait = 0.0
        self.samples = 0


class DegradationDetector:
    """Compares each interval's median step time with the run's own early baseline.

    The baseline is the fastest of the first ``baseline_intervals`` interval medians, so a slow first interval
    (compilation, allocator growth, cudnn autotuning) does not hide a later slowdown.

    Args:
        threshold: fraction above the baseline that counts as degraded (0.2 = 20%).
        baseline_intervals: intervals that form the baseline.
    """

    def __init__(self, threshold: float, baseline_intervals: int = 2) -> None:
        self.threshold = threshold
        self.baseline_intervals = baseline_intervals
        self._early: list[float] = []

    @property
    def baseline(self) -> float | None:
        """The baseline median step time, once established."""
        return min(self._early) if len(self._early) >= self.baseline_intervals else None

    def check(self, median: float) -> float | None:
        """Feed one interval median; returns the slowdown ratio (e.g. 1.35) when above the threshold."""
        if len(self._early) < self.baseline_intervals:
            self._early.append(median)
            return None
        base = self.baseline
        if base and median > base * (1.0 + self.threshold):
            return median / base
        return None


class DataWaitCheck:
    """The measured data-wait share over the first ``steps`` optimizer steps.

    Args:
        steps: steps to measure.
        threshold: share above which :meth:`update` reports the figure.
    """

    def __init__(self, steps: int, threshold: float) -> None:
        self.steps, self.threshold = steps, threshold
        self.count, self.wait, self.total = 0, 0.0, 0.0
        self.first_step: int | None = None
        self.done = False

    def update(self, step: int, step_time: float, data_wait: float) -> float | None:
        """Add one step; once ``steps`` are in, returns the share if it is above the threshold (once)."""
        if self.done:
            return None
        if self.first_step is None:
            self.first_step = step
        self.count += 1
        self.wait += data_wait
        self.total += step_time
        if self.count < self.steps:
            return None
        self.done = True
        share = self.wait / self.total if self.total > 0 else 0.0
        # below 1 ms a step, the "wait" is the framework's own work between batches, not something a user can fix
        return share if share > self.threshold and self.wait / self.count >= MIN_ACTIONABLE_WAIT_S else None

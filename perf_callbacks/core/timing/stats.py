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
from dataclasses import dataclass

MIN_ACTIONABLE_WAIT_S = 1e-3
MIN_SLOWDOWN_S = 3.0  # a slowdown shorter than this is a hiccup (another process, the scheduler), not a degradation


class StepStats:
    """Accumulates the optimizer steps of one logging interval (steps inside profiling windows are left out)."""

    def __init__(self) -> None:
        self.units: tuple[str, int] | None = None  # ("sample" or "micro-batch", how many) in the first step added
        self.varied = False  # the batch size or the accumulation changed since: compare times per sample
        self.first_step: int | None = None  # the first and last step added in this interval
        self.last_step: int | None = None
        self.reset()

    def update(self, step_time: float, data_wait: float, samples: int | None, micro_batches: int = 1,
               step: int | None = None) -> None:
        """Add optimizer step ``step`` (seconds) of ``samples`` samples in ``micro_batches`` micro-batches."""
        self.step_times.append(step_time)
        if samples:
            unit, count = "sample", samples
            self.samples += samples
        else:
            unit, count = "micro-batch", micro_batches if micro_batches > 1 else 1
        self.unit_times.append(step_time / count)
        self.data_wait += data_wait
        if step is not None:
            if self.first_step is None:
                self.first_step = step
            self.last_step = step
        if (units := self.units) is None:
            self.units = (unit, count)
        elif not self.varied and (count != units[1] or unit != units[0]):
            self.varied = True

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
        self.unit_times: list[float] = []  # per sample (else per micro-batch): comparable when the batch changes
        self.data_wait = 0.0
        self.samples = 0
        self.first_step = self.last_step = None


class DegradationDetector:
    """Tells a lasting slowdown from noise, on per-interval median step times.

    - The first ``warmup_intervals`` intervals are skipped (compilation, allocator growth, cudnn autotuning).
    - The baseline is the median of the next ``baseline_intervals`` interval medians; their spread (a robust standard
      deviation: 1.4826 times their median absolute deviation) is the run's noise.
    - An interval is slow when its median is above the baseline by more than ``threshold`` *and* by more than three
      times the noise; the warning fires once, after ``persist`` slow intervals in a row that together last at least
      ``min_seconds`` (so a scheduler hiccup across three short intervals of a fast loop is not a "lasting" slowdown).
    - The engine feeds only clean intervals: those holding a profiling window, validation or a checkpoint save are
      left out, since their step times are not comparable.
    - Where the interval's own time is known (``own``: its mean time per unit less the time the training thread
      waited for a CPU, see ``core/timing/cpu_wait.py``), an interval is slow only when its own time is beyond the
      baseline's by the same rule: other processes that take the cores make steps longer, not the run slower.

    Args:
        threshold: fraction above the baseline that counts as slow (0.2 = 20%).
        warmup_intervals: intervals skipped before the baseline.
        baseline_intervals: intervals that form the baseline.
        persist: slow intervals in a row before the warning.
        min_seconds: the slow intervals' total duration (the ``seconds`` given to :meth:`check`) before the warning.

    Example:
        >>> d = DegradationDetector(0.2)
        >>> medians = [5.0, 2.0, 2.1, 1.9, 2.0, 2.05, 3.0, 3.1, 3.2]  # warm-up, baseline of 5, then 50% slower
        >>> [d.check(m, step) for step, m in enumerate(medians, 1)][-1] is not None
        True
    """

    def __init__(self, threshold: float, warmup_intervals: int = 1, baseline_intervals: int = 5,
                 persist: int = 3, min_seconds: float = 0.0) -> None:
        self.threshold, self.warmup, self.persist, self.min_seconds = threshold, warmup_intervals, persist, min_seconds
        self.baseline_intervals = baseline_intervals
        self._seen = 0
        self._early: list[float] = []
        self._early_own: list[float | None] = []  # the baseline intervals' own time, where known
        self._base_steps: tuple[int, int] | None = None
        self._slow: list[tuple[int, float, float]] = []  # (step, median, seconds) of each slow interval in a row
        self.fired = False

    @property
    def baseline(self) -> float | None:
        """The baseline median step time, once established."""
        return statistics.median(self._early) if len(self._early) >= self.baseline_intervals else None

    @property
    def noise(self) -> float:
        """Relative robust spread of the baseline interval medians (1.4826 x MAD / median)."""
        base = self.baseline
        if not base:
            return 0.0
        return 1.4826 * statistics.median(abs(m - base) for m in self._early) / base

    @property
    def own_baseline(self) -> float | None:
        """The baseline's own time (median of its intervals'), once established and known for each of them."""
        owns = [x for x in self._early_own if x is not None]
        return statistics.median(owns) if self.baseline and len(owns) == len(self._early) else None

    def check(self, median: float, step: int, seconds: float = 0.0, first_step: int | None = None,
              own: float | None = None) -> Slowdown | None:
        """Feed one clean interval's median (any unit) ending at ``step``, and how long it lasted (``seconds``).

        ``first_step`` is the interval's first step (default: ``step``); the slowdown names its steps and the
        baseline's from the first step of their first interval to the last step of their last. ``own`` is the
        interval's own time in the median's unit (None: unknown).
        Returns the slowdown once it lasts: ``persist`` slow intervals in a row, ``min_seconds`` long in all.
        """
        self._seen += 1
        if self._seen <= self.warmup or self.fired:
            return None
        first = step if first_step is None else first_step
        base = self.baseline
        if base is None:
            self._early.append(median)
            self._early_own.append(own)
            self._base_steps = (self._base_steps[0] if self._base_steps else first, step)
            return None
        if not base or median / base - 1.0 <= max(self.threshold, 3.0 * self.noise) or not self._own_slow(own):
            self._slow = []
            return None
        self._slow.append((first, median, seconds))
        lasted = sum(s for _, _, s in self._slow)
        if len(self._slow) < self.persist or lasted < self.min_seconds:
            return None
        self.fired = True
        medians = [m for _, m, _ in self._slow]
        return Slowdown(statistics.median(medians) / base, base, statistics.median(medians), self._slow[0][0],
                        step, self._base_steps or (0, 0), len(self._slow), lasted)

    def _own_slow(self, own: float | None) -> bool:
        """Whether the interval's own time is beyond the baseline's as well (True when either is unknown)."""
        base = self.own_baseline
        if own is None or not base:
            return True
        noise = 1.4826 * statistics.median(abs(x - base) for x in self._early_own if x is not None) / base
        return own / base - 1.0 > max(self.threshold, 3.0 * noise)


@dataclass(frozen=True)
class Slowdown:
    """A lasting slowdown: the slow intervals' median against the baseline, where each was measured, how long.

    ``ratio`` is the slow intervals' median over the baseline; ``seconds`` how long the slow intervals lasted in all.
    """

    ratio: float
    baseline: float
    median: float
    since_step: int
    until_step: int
    baseline_steps: tuple[int, int]
    intervals: int
    seconds: float = 0.0


class DataWaitCheck:
    """The measured data-wait share over the first ``steps`` optimizer steps after a warm-up step.

    The first step seen is a warm-up and is not measured: its fetch holds one-time costs (creating the iterator,
    starting workers, lazy imports, cold caches) that say nothing about the loader's steady pace. With ``num_workers``
    workers, each worker's first batch holds its start: the rest of that first round (``extra_warmup`` steps) is
    left out too. The share is the
    measured steps' total data wait over their total step time; it is reported only when the *median* step waited at
    least 1 ms, so that one preempted fetch cannot make a fast loader look slow.

    Args:
        steps: steps to measure.
        threshold: share above which :meth:`update` reports the figure.
    """

    def __init__(self, steps: int, threshold: float) -> None:
        self.steps, self.threshold = steps, threshold
        self.waits: list[float] = []  # per measured step (seconds)
        self.times: list[float] = []  # their step times (seconds)
        self.total = 0.0  # their step time
        self.warmed_up = False
        self.extra_warmup = 0  # steps left out after the first: the rest of the workers' first round
        self.first_step: int | None = None
        self.done = False

    @property
    def measuring(self) -> bool:
        """The warm-up is over: the next step is measured."""
        return self.warmed_up and self.extra_warmup <= 0
    @property
    def count(self) -> int:
        """Steps measured so far."""
        return len(self.waits)

    def update(self, step: int, step_time: float, data_wait: float) -> float | None:
        """Add one step; once ``steps`` are in, returns the share if it is above the threshold (once)."""
        if self.done:
            return None
        if not self.warmed_up:
            self.warmed_up = True
            return None
        if self.extra_warmup > 0:
            self.extra_warmup -= 1
            return None
        if self.first_step is None:
            self.first_step = step
        self.waits.append(data_wait)
        self.times.append(step_time)
        self.total += step_time
        if self.count < self.steps:
            return None
        self.done = True
        share = sum(self.waits) / self.total if self.total > 0 else 0.0
        # below 1 ms a step, the "wait" is the framework's own work between batches, not something a user can fix
        actionable = statistics.median(self.waits) >= MIN_ACTIONABLE_WAIT_S
        return share if share > self.threshold and actionable else None

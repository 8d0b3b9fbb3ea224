"""What the engine measured, step by step: interval metrics, and the warnings those measurements back.

Every warning here quotes a measurement: the data-wait share over the first ``data_wait_steps`` steps, and a lasting
slowdown against the run's own baseline. Nothing is said from a setting alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.cpu_wait import CpuWait
from perf_callbacks.core.dataloader import Finding, data_wait_finding
from perf_callbacks.core.memory import MemorySampler
from perf_callbacks.core.outputs import Outputs
from perf_callbacks.core.stats import MIN_SLOWDOWN_S, DataWaitCheck, DegradationDetector, StepStats
from perf_callbacks.exceptions import DataLoaderWarning, PerformanceDegradationWarning, PerfWarning, ShardingWarning

WarnFn = Callable[[str, type[PerfWarning], str], None]


class StepMonitor:
    """Step statistics of one rank, the data-wait check and the slowdown detector.

    Args:
        config: thresholds and ``data_wait_steps``.
        ctx: the loader's name and workers, the logging interval and where metrics go.
        warn: ``warn(key, category, message)``, the engine's warn-once (rank 0).
        outputs: the run's writers: a logger that raises turns ``metrics`` off (default: a guard of its own).
        cpu_wait: how long the training thread waited for a CPU in each interval (default: Linux's run-queue delay,
            read at each logging step on the thread that logs, the training loop's).
    """

    def __init__(self, config: PerfConfig, ctx: RunContext, warn: WarnFn, outputs: Outputs | None = None,
                 cpu_wait: CpuWait | None = None) -> None:
        self.ctx, self._warn = ctx, warn
        self.outputs = outputs or Outputs()
        self.cpu_wait = cpu_wait or CpuWait()
        self.stats = StepStats()
        self.degradation = DegradationDetector(config.degradation_threshold, min_seconds=MIN_SLOWDOWN_S)
        self.data_wait_check = DataWaitCheck(config.data_wait_steps, config.data_wait_threshold)
        self.overhead = {"window": 0.0, "log": 0.0}  # seconds of our own work in this interval
        self._units: tuple[str, int] | None = None  # ("sample" or "micro-batch", how many) in the first step measured
        self._varied = False  # the batch size or the accumulation changed: the slowdown is told per sample
        self._steps: tuple[int, int] | None = None  # the first and last step measured in this interval
        self.rates: Callable[[dict[str, float]], None] | None = None  # adds rates from step time (TFLOP/s, MFU)

    def measured(self, step: int, step_time: float, wait: float, samples: int | None, loader_timed: bool,
                 micro_batches: int = 1) -> None:
        """One optimizer step of ``micro_batches`` micro-batches outside profiling windows (seconds)."""
        self.stats.update(step_time, wait, samples, micro_batches)
        self._steps = (self._steps[0], step) if self._steps else (step, step)
        unit, count = ("sample", samples) if samples else ("micro-batch", micro_batches if micro_batches > 1 else 1)
        if self._units is None:
            self._units = (unit, count)
        elif not self._varied and (count != self._units[1] or unit != self._units[0]):
            self._varied = True
        if loader_timed and not self.data_wait_check.done:  # done: update() returns None (skip the call)
            share = self.data_wait_check.update(step, step_time, wait)
            if share is not None:
                name, workers = self.ctx.data_loader
                first = self.data_wait_check.first_step or 0
                message = data_wait_finding(name, share, first, step, workers, self.ctx.local_world_size).message
                self._warn("data_wait", DataLoaderWarning, self.ctx.rephrase(message))

    def set_aside(self) -> None:
        """A step left out of every figure (the FLOP-counting step): if it is the first, it is the data-wait warm-up.

        The data-wait check skips the first step it sees, whose fetch holds one-time costs; a first step set aside
        already had those, so the next step is measured.
        """
        self.data_wait_check.warmed_up = True

    def findings(self, findings: list[Finding]) -> None:
        """Warn once for each DataLoader finding.

        ``num_workers=0`` alone is no problem (an in-memory dataset loads fastest in-process): it is said only with the
        measured data-wait share (:meth:`measured`), so the advice is always backed by a measurement.
        """
        for f in findings:
            if f.code == "num_workers":
                continue
            category = ShardingWarning if f.code in ("not_sharded", "double_sharded") else DataLoaderWarning
            self._warn(f"{f.code}:{f.loader}", category, self.ctx.rephrase(f.message))

    def log_interval(self, step: int, memory: MemorySampler | None, clean: bool, loader_timed: bool,
                     extra: Callable[[dict[str, float]], None] | None = None) -> None:
        """Close the logging interval ending at ``step``: log its metrics; ``clean`` feeds the slowdown detector."""
        metrics, lasted = self.stats.compute(), sum(self.stats.step_times)
        per_unit = statistics.median(self.stats.unit_times) * 1e3 if self.stats.unit_times else None
        own = _own_ms(self.stats.unit_times, lasted, self.cpu_wait.interval())  # read every interval: the next starts
        self.stats.reset()
        measured, self._steps = self._steps or (step, step), None
        if not loader_timed:
            metrics.pop("train/data_wait_fraction", None)
        if self.rates is not None:
            self.rates(metrics)
        if memory is not None:
            metrics.update(memory.sample())
            if extra is not None:
                extra(metrics)
        for kind, seconds in self.overhead.items():
            metrics[f"overhead/{kind}_ms"] = seconds * 1e3
        self.overhead = dict.fromkeys(self.overhead, 0.0)
        if per_unit is not None and clean:  # per sample: a batch size or accumulation that grows is no slowdown
            self._check_slowdown(per_unit, measured, lasted, own)
        log = self.ctx.log_metrics
        if log is not None and metrics:
            self.outputs.call("metrics", lambda: log({f"perf/{k}": v for k, v in metrics.items()}, step))

    def _check_slowdown(self, median: float, steps: tuple[int, int], seconds: float, own: float | None) -> None:
        """``steps``: the first and last step measured in the interval; ``own``: its own time per unit (ms)."""
        slow = self.degradation.check(median, steps[1], seconds, first_step=steps[0], own=own)
        if slow is None:
            return
        unit, count = self._units or ("micro-batch", 1)
        what, scale = (f"time per {unit}", 1) if self._varied else ("step time", count)  # per step when units fixed
        base = self.degradation.baseline_intervals
        self._warn("degradation", PerformanceDegradationWarning, (
            f"median {what} has been {slow.ratio - 1:.0%} above this run's baseline for {slow.intervals} logging "
            f"intervals ({slow.seconds:.1f} s, steps {slow.since_step}-{slow.until_step}): "
            f"{slow.median * scale:.2f} ms against a baseline of {slow.baseline * scale:.2f} ms, the median of "
            f"{base} logging intervals over steps {slow.baseline_steps[0]}-{slow.baseline_steps[1]}, beyond the "
            f"baseline's own spread ({self.degradation.noise:.0%}); intervals with profiling windows, validation or "
            "checkpoints are left out. Look for memory fragmentation (reserved >> allocated), a growing Python-side "
            "cache, other jobs on the machine, or thermal throttling"))


def _own_ms(unit_times: list[float], lasted: float, waited: float | None) -> float | None:
    """The interval's mean time per unit (ms) less its share of the time the thread waited for a CPU; None: unknown."""
    if waited is None or lasted <= 0 or not unit_times:
        return None
    return statistics.fmean(unit_times) * 1e3 * (1.0 - min(waited, lasted) / lasted)

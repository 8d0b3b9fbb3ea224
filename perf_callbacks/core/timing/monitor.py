"""What the engine measured, step by step: interval metrics, and the warnings those measurements back.

Every warning here quotes a measurement: the data-wait share over the first ``data_wait_steps`` steps, and a lasting
slowdown against the run's own baseline. Nothing is said from a setting alone. The data-wait warning's advice rests on
what the loader's workers did over those steps (``core/timing/worker_load.py``, read when the check starts and ends),
and a wait that was the training thread waiting for a CPU is no slow loader: it is not said.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from perf_callbacks.analysis.judge.advice import LoaderEvidence, available_cpus, ranks_on_machine
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.core.memory.sampler import MemorySampler
from perf_callbacks.core.timing.cpu_wait import CpuWait
from perf_callbacks.core.timing.dataloader import Finding, data_wait_finding
from perf_callbacks.core.timing.fetch_clock import prepare
from perf_callbacks.core.timing.stats import (
    MIN_ACTIONABLE_WAIT_S,
    MIN_SLOWDOWN_S,
    DataWaitCheck,
    DegradationDetector,
    Slowdown,
    StepStats,
)
from perf_callbacks.core.timing.worker_load import Load, LoadMark, LoadProbe
from perf_callbacks.core.warn import WarnFn
from perf_callbacks.exceptions import DataLoaderWarning, PerformanceDegradationWarning, ShardingWarning


class StepMonitor:
    """Step statistics of one rank, the data-wait check and the slowdown detector.

    Args:
        config: thresholds and ``data_wait_steps``.
        ctx: the loader's name and workers, the logging interval and where metrics go.
        warn: ``warn(key, category, message)``, the engine's warn-once (rank 0).
        outputs: the run's writers: a logger that raises turns ``metrics`` off (default: a guard of its own).
        cpu_wait: how long the training thread waited for a CPU in each interval (default: Linux's run-queue delay,
            read at each logging step on the thread that logs, the training loop's).
        rates: adds the rates that come from step time (TFLOP/s, MFU) to an interval's metrics (the engine's).
    """

    def __init__(self, config: PerfConfig, ctx: RunContext, warn: WarnFn, outputs: Outputs | None = None,
                 cpu_wait: CpuWait | None = None, rates: Callable[[dict[str, float]], None] | None = None) -> None:
        self.ctx, self._warn = ctx, warn
        self.outputs = outputs or Outputs()
        self.cpu_wait = cpu_wait or CpuWait()
        self.stats = StepStats()
        self.degradation = DegradationDetector(config.degradation_threshold, min_seconds=MIN_SLOWDOWN_S)
        self.data_wait_check = DataWaitCheck(config.data_wait_steps, config.data_wait_threshold)
        self.overhead = {"window": 0.0, "log": 0.0}  # seconds of our own work in this interval
        self.rates = rates  # adds rates from step time (TFLOP/s, MFU)
        self._check_mark: LoadMark | None = None  # the load counters when the data-wait check began
        self._round_set = False  # the data-wait check leaves the workers' first round out
        self._interval_mark: LoadMark | None = None  # ... when this logging interval began
        self.slowdown: Slowdown | None = None  # the slowdown alarm, once it fired
        prepare()  # before the training loader forks its workers: they time their fetches (core/timing/fetch_clock.py)

    def measured(self, step: int, step_time: float, wait: float, samples: int | None, loader_timed: bool,
                 micro_batches: int = 1) -> None:
        """One optimizer step of ``micro_batches`` micro-batches outside profiling windows (seconds)."""
        self.stats.update(step_time, wait, samples, micro_batches, step)
        if loader_timed and not self.data_wait_check.done:
            self._check_data_wait(step, step_time, wait)

    def _check_data_wait(self, step: int, step_time: float, wait: float) -> None:
        check, (name, workers) = self.data_wait_check, self.ctx.data_loader
        if not self._round_set:  # the workers' first round is a warm-up too
            check.extra_warmup, self._round_set = max(0, (workers or 0) - 1), True
        if self._check_mark is None and check.measuring:  # read when the check starts and ends, never in between
            self._check_mark = LoadProbe(workers).mark()
        share = check.update(step, step_time, wait)
        if self._check_mark is None and check.measuring:
            self._check_mark = LoadProbe(workers).mark()
        if share is None:
            return
        probe = LoadProbe(workers)
        evidence = self._evidence(probe.since(self._check_mark or probe.mark()), share)
        if evidence is None:  # the fetch was slow because the thread waited for a CPU: not the loader
            return
        first = check.first_step or 0
        message = data_wait_finding(name, share, first, step, workers, self.ctx.local_world_size, evidence).message
        self._warn("data_wait", DataLoaderWarning, self.ctx.rephrase(message))

    def _evidence(self, load: Load, share: float) -> LoaderEvidence | None:
        """What the check measured, for the advice; None when the wait was the training thread waiting for a CPU.

        In-process (``num_workers=0``), the fetches waited for a CPU as the rest of the step did: the median wait and
        the share less that part of them must still reach 1 ms and the threshold (as ``analysis.evidence`` judges).
        """
        check, workers = self.data_wait_check, self.ctx.data_loader[1]
        wait, ran = statistics.median(check.waits), 1.0 - (load.contention or 0.0) if workers == 0 else 1.0
        if wait * ran < MIN_ACTIONABLE_WAIT_S or share * ran <= check.threshold:
            return None
        cores = max(1, available_cpus() // (self.ctx.local_world_size or ranks_on_machine()))
        own = statistics.median(t - w for t, w in zip(check.times, check.waits, strict=True))
        f = load.fetches if workers else None  # timed in the workers: their fetches, not their idle time
        timed = (None, None, None) if f is None or f.wall_s <= 0 else (
            f.p50_s * 1e3, min(1.0, f.cpu_s / f.wall_s), min(1.0, (f.cpu_s + f.run_queue_s) / f.wall_s))
        return LoaderEvidence(workers, cores, statistics.median(check.times) * 1e3, wait * 1e3, own * 1e3,
                              load.workers_cpu_fraction, load.workers_busy, load.blocked, share, *timed)

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
                     extra: Callable[[dict[str, float]], None] | None = None,
                     more: dict[str, float] | None = None) -> None:
        """Close the logging interval ending at ``step``: log its metrics; ``clean`` feeds the slowdown detector.

        ``more``: metrics the engine adds to the interval's (its ledger, ``core/timing/ledger.py``).
        """
        mark = LoadProbe(self.ctx.data_loader[1]).mark()  # one read of the thread's counters serves both below
        metrics, lasted = self.stats.compute(), sum(self.stats.step_times)
        per_unit = statistics.median(self.stats.unit_times) * 1e3 if self.stats.unit_times else None
        waited = self.cpu_wait.interval(mark.own[1] if mark.own else None)  # every interval: the next one starts
        own = _own_ms(self.stats.unit_times, lasted, waited)
        first, last = self.stats.first_step, self.stats.last_step
        measured = (first, last) if first is not None and last is not None else (step, step)
        self.stats.reset()
        if not loader_timed:
            metrics.pop("train/data_wait_fraction", None)
        self._interval_load(metrics, mark)
        if self.rates is not None:
            self.rates(metrics)
        if memory is not None:
            metrics.update(memory.sample())
            if extra is not None:
                extra(metrics)
        for kind, seconds in self.overhead.items():
            metrics[f"overhead/{kind}_ms"] = seconds * 1e3
        self.overhead = dict.fromkeys(self.overhead, 0.0)
        if more:
            metrics.update(more)
        if per_unit is not None and clean:  # per sample: a batch size or accumulation that grows is no slowdown
            self._check_slowdown(per_unit, measured, lasted, own)
        log = self.ctx.log_metrics
        if log is not None and metrics:
            self.outputs.call("metrics", lambda: log({f"perf/{k}": v for k, v in metrics.items()}, step))

    def _interval_load(self, metrics: dict[str, float], now: LoadMark) -> None:
        """The interval's wait for a CPU and its loader workers' CPU share, where the kernel says (one mark each)."""
        start, self._interval_mark = self._interval_mark, now
        if start is None:
            return
        load = LoadProbe(self.ctx.data_loader[1]).between(start, now)
        if load.contention is not None:
            metrics["train/cpu_contention_fraction"] = load.contention
        if load.workers_cpu_fraction is not None:
            metrics["loader/workers_cpu_fraction"] = load.workers_cpu_fraction
        if load.workers_busy is not None and load.workers_cpu_fraction is not None:
            metrics["loader/workers_blocked_fraction"] = 1.0 - load.workers_busy
            metrics["loader/workers_cpu_contention_fraction"] = max(load.workers_busy - load.workers_cpu_fraction, 0.0)
        if load.fetches is not None:  # timed in the workers: blocked while fetching, not idle on their queue
            metrics["loader/fetch_ms"] = load.fetches.p50_s * 1e3
            metrics["loader/fetch_blocked_fraction"] = load.fetches.blocked_fraction

    def _check_slowdown(self, median: float, steps: tuple[int, int], seconds: float, own: float | None) -> None:
        """``steps``: the first and last step measured in the interval; ``own``: its own time per unit (ms)."""
        slow = self.degradation.check(median, steps[1], seconds, first_step=steps[0], own=own)
        if slow is None:
            return
        self.slowdown = slow
        unit, count = self.stats.units or ("micro-batch", 1)
        what, scale = (f"time per {unit}", 1) if self.stats.varied else ("step time", count)  # per step: fixed units
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

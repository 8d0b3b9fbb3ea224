"""The results: one ``RankResult`` per rank and an ``AnalysisResult`` for the window, and their JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perf_callbacks.analysis.results.keys import RANK_KEYS, WINDOW_KEYS
from perf_callbacks.analysis.results.parts import Measures, MemoryParts, MfuParts, flat, unflat
from perf_callbacks.analysis.results.recommendation import Recommendation, pageable_copies, recommendation_dicts
from perf_callbacks.analysis.results.scalars import window_scalars
from perf_callbacks.analysis.results.verdicts import Verdict
from perf_callbacks.analysis.trace.timeline import Timeline


@dataclass
class StepResult:
    """One ``ProfilerStep#N``: its duration and the milliseconds of each timeline cause inside it."""

    step: int
    time_ms: float
    causes_ms: dict[str, float] = field(default_factory=dict)

    def within_step(self) -> dict[str, float]:
        """The milliseconds by cause within the step's own time.

        The last step's causes run to the window's end, which on a device includes the queued work that finishes after
        the step's host span (the device tail); they are cut to the step's time, each cause in proportion.

        Example:
            >>> StepResult(3, 100.0, {"compute": 120.0, "sync": 30.0}).within_step()
            {'compute': 80.0, 'sync': 20.0}
        """
        total = sum(self.causes_ms.values())
        cut = self.time_ms / total if total > self.time_ms > 0 else 1.0
        return {c: ms * cut for c, ms in self.causes_ms.items()}


@dataclass
class RankResult:
    """Metrics, verdict and recommendations for one rank. Fractions are of the window (see ``Timeline``).

    ``start_us``/``end_us`` bound the window in wall-clock microseconds where the trace has ``baseTimeNanoseconds``
    (Kineto's timestamps are then relative to it), else in the trace's own clock.
    ``set_aside_ms`` holds the milliseconds of validation and checkpoint saves inside the window (our
    ``perf_callbacks.validation``/``perf_callbacks.checkpoint`` spans), which no other figure counts.
    ``collectives_ms`` holds the duration of each collective outside that time (our own logging's gather is not the
    user's), and ``collective_steps`` the ``ProfilerStep`` number each one started in (-1 before the first step).
    ``machine`` is what our callbacks recorded of the machine and the loader (``cpu_cores``, ``local_world_size``,
    ``loader``, ``num_workers``, ``cuda``; empty for traces of other tools), and ``cuda_on_host`` whether that machine
    had CUDA (said by ``machine``, else by the trace's GPU list or runtime calls).
    ``prologue_ms``/``epilogue_ms``: on a trace without ProfilerStep, the traced host-only time before the first and
    after the last device op, outside the window (start-up such as CUDA or cuBLAS initialisation).
    ``strip`` is the HTML report's timeline strip, run-length encoded (see :mod:`perf_callbacks.analysis.rank.strip`),
    and ``strip_names`` the device work that ran longest in each of its runs (its hover text; ``""`` for none).
    ``load`` is the window's measured load (the training thread's and the DataLoader workers' time on a CPU and
    waiting for one, see :func:`perf_callbacks.analysis.trace.machine.load_of`; empty when not recorded), and ``loader``
    the loader block the verdict derives from it, ``{num_workers, workers_cpu_fraction, fetch_ms_p50, advice_kind}``
    (None for traces of other tools; see :mod:`perf_callbacks.analysis.judge.load`). With the load measured, ``losses``
    holds ``cpu_contention``: the share of the window the training thread waited for a CPU.
    ``arrivals`` holds its arrival at each collective and its own time per phase, ``{host, calls, phases}``
    (:mod:`perf_callbacks.analysis.rank.arrivals`; empty in sidecars of older versions).
    ``modules`` holds the module figures at full depth (``analysis.modules.rank_modules``; empty without spans).
    ``memory`` (:class:`~perf_callbacks.analysis.results.parts.MemoryParts`: the peak, the device's capacity, memory
    by op, the curve, categories and growth) and ``measures`` (:class:`~perf_callbacks.analysis.results.parts.Measures`:
    collectives, copies, launch latency, the op table, the roofline) are parts; in the JSON their keys are flat among
    the others (``peak_memory_bytes``, ``memory_peak``, ``communication``...), in the order of ``keys.RANK_KEYS``.
    """

    rank: int
    path: str
    span_ms: float
    gpu_utilization: float | None
    kernel_busy_fraction: float | None
    step_time_ms: float | None
    data_wait_fraction: float
    losses: dict[str, float]
    steps: list[StepResult]
    copies_ms: dict[str, float]
    comm_ms: dict[str, float]
    top_ops: list[dict[str, Any]]
    profiler_flags: list[str]
    data_loader: str | None
    collectives_ms: list[float]
    sync_calls_ms: dict[str, float]
    launches_per_step: float | None
    verdict: Verdict = "compute_bound"
    recommendations: list[Recommendation] = field(default_factory=list)
    timeline: Timeline | None = field(default=None, repr=False)
    rank_source: str = "order"
    run_id: str = ""
    start_us: float = 0.0
    end_us: float = 0.0
    device_kind: str | None = None
    window_definition: str = ""
    backlog_fraction: float = 0.0
    graph_idle_fraction: float = 0.0
    copy_exposed_ms: dict[str, float] = field(default_factory=dict)
    collectives_by_op_ms: dict[str, float] = field(default_factory=dict)
    devices: list[dict[str, Any]] = field(default_factory=list)
    bad_events: int = 0
    runtime_calls: int = 0
    host_traced: bool = True
    set_aside_ms: dict[str, float] = field(default_factory=dict)
    flops: dict[str, Any] = field(default_factory=dict)
    collective_steps: list[int] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    cuda_on_host: bool = False
    prologue_ms: float = 0.0
    epilogue_ms: float = 0.0
    strip: str = ""
    strip_names: list[str] = field(default_factory=list)
    load: dict[str, Any] = field(default_factory=dict)
    loader: dict[str, Any] | None = None
    modules: dict[str, Any] = field(default_factory=dict)
    arrivals: dict[str, Any] = field(default_factory=dict)
    memory: MemoryParts = field(default_factory=MemoryParts)
    measures: Measures = field(default_factory=Measures)

    def named_copies(self) -> list[tuple[str, float]]:
        """The kinds the copy advice names, and their ms: the top 3 by exposed (else all) time, >= 1/10 the first."""
        ranked = sorted((self.copy_exposed_ms or self.copies_ms).items(), key=lambda kv: -kv[1])
        return [(k, ms) for k, ms in ranked if ms >= 0.1 * ranked[0][1]][:3]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view (the timeline is left out): one flat object, the parts' keys among the others."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("timeline", "steps", "memory", "measures")}
        out.update(flat(self.memory))
        out.update(flat(self.measures))
        out["steps"] = [s.__dict__ for s in self.steps]
        out["recommendations"] = recommendation_dicts(self.recommendations)
        return {k: out[k] for k in RANK_KEYS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankResult:
        """Rebuild a result from ``to_dict`` output (the timeline is not kept, so it is None).

        The JSON does not hold a recommendation's ``copy_kinds``: the copy recommendation gets them from the copy
        figures it was written from (:meth:`named_copies`), as :func:`perf_callbacks.analysis.judge.verdict.judge_rank`
        did.
        """
        known = {f for f in cls.__dataclass_fields__ if f not in ("timeline", "steps", "memory", "measures")}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["memory"], kwargs["measures"] = unflat(MemoryParts, data), unflat(Measures, data)
        kwargs["sync_calls_ms"] = dict(kwargs.get("sync_calls_ms", {}))
        kwargs["recommendations"] = [Recommendation.of(x) for x in kwargs.get("recommendations", [])]
        steps = [StepResult(int(s["step"]), float(s["time_ms"]), dict(s.get("causes_ms", {})))
                 for s in data.get("steps", [])]
        r = cls(steps=steps, **kwargs)
        named = pageable_copies([k for k, _ in r.named_copies()])
        r.recommendations = [x.naming(named) if x.cause == "copy" else x for x in r.recommendations]
        return r


@dataclass
class AnalysisResult:
    """What ``analyze`` returns for one window (the most recent one when given an ``output_dir``).

    Args:
        path: the window folder or trace file.
        verdict: one of ``VERDICTS``: the cause of the largest removable loss.
        gpu_utilization: mean over ranks of the device-busy fraction, None on CPU-only traces.
        data_wait_fraction: mean over ranks of the share of the window spent waiting for data.
        step_time_ms: median step time over all ranks.
        top_ops: the top ops over all ranks.
        recommendations: ranked by their gain, each naming its evidence and its fix; each a ``Recommendation``
            (:mod:`perf_callbacks.analysis.results.recommendation`): its text, with ``cause``, ``estimated_gain_ms``,
            ``estimated_gain_fraction`` and ``basis``; in the JSON one object with those keys and ``text``.
        ranks: one result per rank, sorted by rank.
        stragglers: global ranks that reach collectives late.
        imbalance_ratio: max / mean over ranks of step time minus collective wait (1.0 = balanced).
        step_time_spread_ms: max - min over ranks of the median step time.
        straggler_reasons: rank -> why it is late.
        windows: summaries of every window (and trace set) found: the headline first, then most recent first.
        verdict_margin: the largest loss minus the 10% threshold (negative when under it), None without losses.
        runner_up: the verdict that the next largest loss would give.
        verdict_note: why the verdict is a close call (``close to the 10% threshold``), or empty.
        devices: with several devices in one rank's file, one entry per rank and device.
        notes: what the discovery found worth saying (duplicate ranks, separate runs, partial windows).
        errors: one line per file that could not be read (file name and reason).
        partial: whether the window has fewer completed steps than it was meant to hold.
        device: the kind of device activity in the window (``cuda``, ``rocm``, ``mtia``...), ``none`` when no rank
            has any: every figure is then host time, and ``compute_bound`` means host compute.
        loader: the training loader's block, ``{num_workers, workers_cpu_fraction, fetch_ms_p50, advice_kind}``, of
            the rank that waited longest for data (None without our metadata; see ``analysis.load``).
        hang: what the hang watchdog's ``hang-rank{R}`` folders say, ``{ranks, missing, summary}`` (see
            ``analysis.hang``), None without one.
        modules: device time, FLOPs and parameters by module (``module_spans``) at depth 1, or at ``--modules DEPTH``:
            ``{module, group, members, time_us, time_fraction, flops, flops_fraction, params, calls}`` (see
            ``analysis.modules``); empty without module spans.
        culprit: the rank the others wait for at the collectives, judged by arrival order
            (:mod:`perf_callbacks.analysis.judge.arrival`): ``{rank, phase, last_share, steps, wait_ms_each,
            collectives, ...}``; None when no rank stands out beyond the noise.
        merged_trace: the one-timeline trace of several ranks written by ``report --merge-ranks``, else None.
        others: the full result of every other window and trace set (not in the JSON; the HTML shows them).
        captures: each captured window, why it was opened and what differs from the nearest healthy window
            (``analysis.captured``).
        memory: the device memory (:class:`~perf_callbacks.analysis.results.parts.MemoryParts`): the highest peak of
            any rank (``peak_memory_bytes``, when memory was profiled), memory by op, what the peak is made of, growth.
        efficiency: the model FLOPs utilization (:class:`~perf_callbacks.analysis.results.parts.MfuParts`): FLOPs per
            step, achieved and peak TFLOP/s, ``mfu`` and its gap by cause. Not named ``mfu``: that is the JSON's
            float (``efficiency.mfu``).
        measures: collectives, copies, launch latency, the op table and the roofline, combined over the ranks
            (:class:`~perf_callbacks.analysis.results.parts.Measures`).

    The parts' keys are flat in the JSON among the others, in the order of ``keys.WINDOW_KEYS``.
    """

    path: str
    verdict: Verdict
    gpu_utilization: float | None
    data_wait_fraction: float
    step_time_ms: float | None
    top_ops: list[dict[str, Any]]
    recommendations: list[Recommendation]
    ranks: list[RankResult]
    stragglers: list[int] = field(default_factory=list)
    imbalance_ratio: float | None = None
    step_time_spread_ms: float | None = None
    straggler_reasons: dict[int, str] = field(default_factory=dict)
    windows: list[dict[str, Any]] = field(default_factory=list)
    verdict_margin: float | None = None
    runner_up: Verdict | None = None
    verdict_note: str = ""
    devices: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    partial: bool = False
    captures: list[dict[str, Any]] = field(default_factory=list)
    device: str = ""
    loader: dict[str, Any] | None = None
    hang: dict[str, Any] | None = None
    modules: list[dict[str, Any]] = field(default_factory=list)
    culprit: dict[str, Any] | None = None
    merged_trace: str | None = None
    others: list[AnalysisResult] = field(default_factory=list, repr=False)
    memory: MemoryParts = field(default_factory=MemoryParts)
    efficiency: MfuParts = field(default_factory=MfuParts)
    measures: Measures = field(default_factory=Measures)

    def to_dict(self) -> dict[str, Any]:
        """Return the ``perf-callbacks report --json`` object."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("ranks", "others", "memory", "efficiency",
                                                                    "measures")}
        out.update(flat(self.memory))
        out.update(flat(self.efficiency))
        out.update(flat(self.measures))
        out["ranks"] = [r.to_dict() for r in self.ranks]
        out["recommendations"] = recommendation_dicts(self.recommendations)
        out["straggler_reasons"] = {str(k): v for k, v in self.straggler_reasons.items()}
        return {k: out[k] for k in WINDOW_KEYS}

    def scalars(self) -> dict[str, float]:
        """The ``perf/window/...`` TensorBoard numbers of the window (:mod:`~perf_callbacks.analysis.results.scalars`).

        Example:
            >>> r = AnalysisResult("x", "compute_bound", None, 0.25, 12.0, [], [], [])
            >>> r.scalars()
            {'perf/window/data_wait_fraction': 0.25, 'perf/window/step_time_ms': 12.0}
        """
        return window_scalars(self)

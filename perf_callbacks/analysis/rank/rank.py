"""Per-rank metrics: step times, busy fractions, losses by cause, copies, communication, memory, and each device."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from statistics import median
from typing import Any

from perf_callbacks.analysis.judge.load import contention_loss
from perf_callbacks.analysis.measures.ops import copy_times, top_kernels, top_ops
from perf_callbacks.analysis.rank.arrivals import arrivals
from perf_callbacks.analysis.rank.measures import rank_measures
from perf_callbacks.analysis.rank.strip import encode, run_names
from perf_callbacks.analysis.results.result import RankResult, StepResult
from perf_callbacks.analysis.trace.aside import within
from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.intervals import Span, clip, intersect, subtract, total, union
from perf_callbacks.analysis.trace.machine import cuda_on_host, load_of, machine_of
from perf_callbacks.analysis.trace.schema import (
    GPU_CORRELATION,
    GPU_DEVICE,
    GPU_KIND,
    GPU_NAME,
    STEP_END,
    STEP_NUMBER,
    STEP_START,
    GpuRow,
    nccl_collective,
)
from perf_callbacks.analysis.trace.timeline import Timeline, build_timeline, devices

GPU_LOSSES = ("input", "sync", "host", "copy", "communication", "other")
CPU_LOSSES = ("input", "communication")


def analyze_rank(trace: RankTrace, top_k: int = 10) -> RankResult | None:
    """Compute one rank's metrics (the verdict is set by ``verdict.judge_rank``); None for an empty trace."""
    tl = build_timeline(trace)
    if tl is None:
        return None
    span = max(tl.measured_us, 1e-9)
    on_gpu = tl.device is not None
    steps = _steps(trace, tl)
    dev = tl.device
    collectives = _collectives(trace, tl)
    return RankResult(
        rank=trace.rank,
        path=str(trace.path),
        span_ms=span / 1e3,
        gpu_utilization=tl.busy_us / span if on_gpu else None,
        kernel_busy_fraction=_kernel_busy(trace, tl) / span if on_gpu else None,
        step_time_ms=median(s.time_ms for s in steps) if steps else None,
        data_wait_fraction=total(subtract(clip(union(trace.data_spans), tl.lo, tl.hi), tl.aside)) / span,
        losses={**_losses(tl, GPU_LOSSES if on_gpu else CPU_LOSSES),
                **contention_loss(load_of(trace.meta), 1.0 - tl.busy_us / span if on_gpu else None)},
        steps=steps,
        copies_ms={k: v / 1e3 for k, v in copy_times(trace, dev).items()},
        comm_ms=_comm_ms(trace, tl),
        top_ops=top_ops(trace, top_k),
        profiler_flags=[k for k in ("with_stack", "record_shapes", "profile_memory") if trace.flag(k)],
        data_loader=min(trace.data_names) if trace.data_names else None,
        collectives_ms=[ms for ms, _ in collectives],
        collective_steps=[step for _, step in collectives],
        sync_calls_ms={k: v / 1e3 for k, v in sorted(tl.sync_calls.items(), key=lambda kv: -kv[1])},
        launches_per_step=_launches_per_step(trace, len(steps), dev, tl.aside) if on_gpu else None,
        timeline=tl,
        **_extra(trace, tl, span),
        **rank_measures(trace, tl, top_k, _device_memory(trace, dev)),
    )


_WORK = ("kernel", "memcpy", "memset")


def _extra(trace: RankTrace, tl: Timeline, span: float) -> dict[str, Any]:
    """The fields added after v0.1: identity, window definition, backlog, graphs, per-kind copies, each device."""
    totals = tl.totals()
    base = trace.meta.get("baseTimeNanoseconds")
    offset = base / 1e3 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0
    return {
        "rank_source": trace.rank_source,
        "run_id": _run_id(trace),
        "start_us": tl.lo + offset,
        "end_us": tl.hi + offset,
        "device_kind": trace.device_kind if trace.has_gpu else None,
        "window_definition": tl.definition,
        "prologue_ms": tl.prologue_us / 1e3,
        "epilogue_ms": tl.epilogue_us / 1e3,
        "strip": encode(tl),
        "strip_names": run_names(encode(tl), tl.lo, tl.hi, ((g[0], g[1], g[GPU_NAME]) for g in trace.gpu
                                                             if g[GPU_DEVICE] == tl.device and g[GPU_KIND] in _WORK)),
        "backlog_fraction": totals["backlog"] / span,
        "graph_idle_fraction": tl.graph_idle_us / span,
        "copy_exposed_ms": {k: v / 1e3 for k, v in tl.copy_exposed_us.items()},
        "collectives_by_op_ms": _collectives_by_op(trace, tl),
        "devices": [_device_view(trace, d, tl) for d in devices(trace)] if len(devices(trace)) > 1 else [],
        "bad_events": trace.bad_events,
        "runtime_calls": trace.runtime_calls,
        "host_traced": bool(trace.runtime_calls) or not trace.has_gpu,
        "set_aside_ms": _set_aside_ms(trace, tl),
        "arrivals": arrivals(trace, tl),
        **_machine(trace),
    }


def _machine(trace: RankTrace) -> dict[str, Any]:
    """The machine and loader the trace was recorded with, their measured load (our metadata), and whether CUDA."""
    machine = machine_of(trace.meta)
    return {"machine": machine, "cuda_on_host": cuda_on_host(trace.meta, machine, trace.runtime_calls),
            "load": load_of(trace.meta)}


def _set_aside_ms(trace: RankTrace, tl: Timeline) -> dict[str, float]:
    """Milliseconds of validation and of checkpoint saves inside the window (left out of every figure)."""
    out: dict[str, float] = {}
    for kind in sorted({k for _, _, k in trace.aside_spans}):
        spans = clip(union((a, b) for a, b, k in trace.aside_spans if k == kind), tl.lo, tl.hi)
        if spans:
            out[kind] = total(spans) / 1e3
    return out


def _losses(tl: Timeline, causes: tuple[str, ...]) -> dict[str, float]:
    span = max(tl.measured_us, 1e-9)
    totals = tl.totals()
    return {c: totals[c] / span for c in causes}


def _device_view(trace: RankTrace, device: int, primary: Timeline) -> dict[str, Any]:
    """Utilization, losses and top kernels of one device of a rank that drives several."""
    tl = primary if device == primary.device else build_timeline(trace, device)
    assert tl is not None  # the trace has ops on this device
    span = max(tl.measured_us, 1e-9)
    n_steps = len(trace.steps)
    return {
        "device": device,
        "gpu_utilization": tl.busy_us / span,
        "losses": _losses(tl, GPU_LOSSES),
        "backlog_fraction": tl.totals()["backlog"] / span,
        "kernels_per_step": _launches_per_step(trace, n_steps, device, tl.aside),
        "comm_ms": _comm_ms(trace, tl),
        "top_kernels": top_kernels(trace, device),
    }


def _run_id(trace: RankTrace) -> str:
    """What tells runs apart in one folder: the job's world size and backend from ``distributedInfo``."""
    info = trace.meta.get("distributedInfo")
    if not isinstance(info, dict):
        return ""
    return f"world_size={info.get('world_size')},backend={info.get('backend')}"


def _steps(trace: RankTrace, tl: Timeline) -> list[StepResult]:
    """Each step runs from its ProfilerStep start to the next one's start (the last to the window end).

    Its time is its ProfilerStep's length less the validation and checkpoint time inside it.
    """
    starts = [s[STEP_START] for s in trace.steps] + [tl.hi]
    out = []
    for (n, ts, end, _tid), nxt in zip(trace.steps, starts[1:], strict=False):
        causes = {k: round(v / 1e3, 4) for k, v in tl.totals(ts, nxt).items() if k != "backlog" or v > 0}
        out.append(StepResult(n, (end - ts - total(clip(tl.aside, ts, end))) / 1e3, causes))
    return out


def _kernel_busy(trace: RankTrace, tl: Timeline) -> float:
    return total(subtract(union((max(g[0], tl.lo), min(g[1], tl.hi)) for g in trace.gpu
                                if g[GPU_KIND] == "kernel" and g[GPU_DEVICE] == tl.device
                                and g[1] > tl.lo and g[0] < tl.hi), tl.aside))


def _is_nccl(g: GpuRow) -> bool:
    return g[GPU_KIND] == "kernel" and "nccl" in g[GPU_NAME].lower()


def _comm_ms(trace: RankTrace, tl: Timeline) -> dict[str, float]:
    """Return collective time in total, and the part that overlapped compute kernels (on the timeline's device)."""
    on_dev = [g for g in trace.gpu if g[GPU_DEVICE] == tl.device]
    nccl = union((g[0], g[1]) for g in on_dev if _is_nccl(g))
    host = union((a, b) for a, b, _ in trace.comm_spans)
    spans = subtract(clip(union(nccl + host), tl.lo, tl.hi), tl.aside)
    kernels = union((g[0], g[1]) for g in on_dev if g[GPU_KIND] == "kernel" and not _is_nccl(g))
    return {"total": total(spans) / 1e3, "overlapped": total(intersect(spans, kernels)) / 1e3}


def _collectives_by_op(trace: RankTrace, tl: Timeline) -> dict[str, float]:
    """Milliseconds per collective (AllReduce, AllGather, ...) from NCCL kernel names, else host collective spans."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for g in trace.gpu:
        name = nccl_collective(g[GPU_NAME]) if _is_nccl(g) and g[GPU_DEVICE] == tl.device else None
        if name:
            spans[name].append((g[0], g[1]))
    if not spans:
        for a, b, span_name in trace.comm_spans:
            if not within(tl.aside, a):
                spans[span_name.split(":", 1)[-1]].append((a, b))
    out = {name: total(subtract(clip(union(s), tl.lo, tl.hi), tl.aside)) / 1e3 for name, s in spans.items()}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _collectives(trace: RankTrace, tl: Timeline) -> list[tuple[float, int]]:
    """``(milliseconds, step)`` of each host collective, then each NCCL kernel on the timeline's device.

    A collective that starts (a kernel: that is launched) inside the time set aside is left out: our own logging's
    cross-rank gather, or a validation loop's, is not the training's. ``step`` is the ``ProfilerStep`` number it
    started in, -1 before the first step.
    """
    starts = [s[STEP_START] for s in trace.steps]

    def step_at(t: float) -> int:
        i = bisect_right(starts, t) - 1
        return trace.steps[i][STEP_NUMBER] if i >= 0 else -1

    out = [((b - a) / 1e3, step_at(a)) for a, b, _ in trace.comm_spans if not within(tl.aside, a)]
    for g in trace.gpu:
        if not _is_nccl(g) or g[GPU_DEVICE] != tl.device:
            continue
        corr = g[GPU_CORRELATION]
        launch = trace.launches.get(corr) if isinstance(corr, int) else None  # a damaged trace's id may be anything
        launched = launch[0] if launch else g[0]
        if not within(tl.aside, launched) and not within(tl.aside, g[0]):
            out.append(((g[1] - g[0]) / 1e3, step_at(launched)))
    return out


def _device_memory(trace: RankTrace, device: int | None) -> int | None:
    props = trace.meta.get("deviceProperties") or []
    for p in props:
        if isinstance(p, dict) and p.get("id") == (device or 0) and "totalGlobalMem" in p:
            return int(p["totalGlobalMem"])
    return None


def _launches_per_step(trace: RankTrace, n_steps: int, device: int | None, aside: list[Span]) -> float | None:
    lo, hi = (trace.steps[0][STEP_START], trace.steps[-1][STEP_END]) if trace.steps else (float("-inf"), float("inf"))
    ops = [g for g in trace.gpu
           if g[GPU_KIND] == "kernel" and g[GPU_DEVICE] == device and lo <= g[0] <= hi and not within(aside, g[0])]
    return len(ops) / n_steps if n_steps else None

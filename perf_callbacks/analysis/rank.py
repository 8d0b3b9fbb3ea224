"""Per-rank metrics: step times, busy fractions, losses by cause, copies, communication, memory."""

from __future__ import annotations

from statistics import median

from perf_callbacks.analysis.events import RankTrace
from perf_callbacks.analysis.intervals import clip, intersect, total, union
from perf_callbacks.analysis.ops import copy_times, top_ops
from perf_callbacks.analysis.result import RankResult, StepResult
from perf_callbacks.analysis.timeline import Timeline, build_timeline

GPU_LOSSES = ("input", "sync", "host", "copy", "communication")
CPU_LOSSES = ("input", "communication")


def analyze_rank(trace: RankTrace, top_k: int = 10) -> RankResult | None:
    """Compute one rank's metrics (the verdict is set by ``verdict.judge_rank``); None for an empty trace."""
    tl = build_timeline(trace)
    if tl is None:
        return None
    span = max(tl.hi - tl.lo, 1e-9)
    totals = tl.totals()
    on_gpu = tl.device is not None
    losses = {c: totals[c] / span for c in (GPU_LOSSES if on_gpu else CPU_LOSSES)}
    steps = _steps(trace, tl)
    return RankResult(
        rank=trace.rank,
        path=str(trace.path),
        span_ms=span / 1e3,
        gpu_utilization=tl.busy_us / span if on_gpu else None,
        kernel_busy_fraction=_kernel_busy(trace, tl) / span if on_gpu else None,
        step_time_ms=median(s.time_ms for s in steps) if steps else None,
        data_wait_fraction=total(clip(union(trace.data_spans), tl.lo, tl.hi)) / span,
        losses=losses,
        steps=steps,
        copies_ms={k: v / 1e3 for k, v in copy_times(trace).items()},
        comm_ms=_comm_ms(trace, tl),
        top_ops=top_ops(trace, top_k),
        peak_memory_bytes=trace.peak_allocated,
        device_memory_bytes=_device_memory(trace, tl.device),
        profiler_flags=[k for k in ("with_stack", "record_shapes", "profile_memory") if trace.flag(k)],
        data_loader=min(trace.data_names) if trace.data_names else None,
        collectives_ms=[(b - a) / 1e3 for a, b, _ in trace.comm_spans] + _nccl_kernels_ms(trace),
        sync_calls_ms={k: v / 1e3 for k, v in sorted(tl.sync_calls.items(), key=lambda kv: -kv[1])},
        launches_per_step=_launches_per_step(trace, len(steps)) if on_gpu else None,
        timeline=tl,
    )


def _steps(trace: RankTrace, tl: Timeline) -> list[StepResult]:
    """Each step runs from its ProfilerStep start to the next one's start (the last to the window end)."""
    starts = [s[1] for s in trace.steps] + [tl.hi]
    out = []
    for (n, ts, end, _tid), nxt in zip(trace.steps, starts[1:], strict=False):
        causes = {k: round(v / 1e3, 4) for k, v in tl.totals(ts, nxt).items()}
        out.append(StepResult(n, (end - ts) / 1e3, causes))
    return out


def _kernel_busy(trace: RankTrace, tl: Timeline) -> float:
    return total(union((max(g[0], tl.lo), min(g[1], tl.hi)) for g in trace.gpu
                       if g[2] == "kernel" and g[4] == tl.device and g[1] > tl.lo and g[0] < tl.hi))


def _comm_ms(trace: RankTrace, tl: Timeline) -> dict[str, float]:
    """Return collective time in total, and the part of it that overlapped compute kernels."""
    nccl = union((g[0], g[1]) for g in trace.gpu if g[2] == "kernel" and "nccl" in g[3].lower())
    host = union((a, b) for a, b, _ in trace.comm_spans)
    spans = clip(union(nccl + host), tl.lo, tl.hi)
    kernels = union((g[0], g[1]) for g in trace.gpu if g[2] == "kernel" and "nccl" not in g[3].lower())
    return {"total": total(spans) / 1e3, "overlapped": total(intersect(spans, kernels)) / 1e3}


def _nccl_kernels_ms(trace: RankTrace) -> list[float]:
    return [(g[1] - g[0]) / 1e3 for g in trace.gpu if g[2] == "kernel" and "nccl" in g[3].lower()]


def _device_memory(trace: RankTrace, device: int | None) -> int | None:
    props = trace.meta.get("deviceProperties") or []
    for p in props:
        if isinstance(p, dict) and p.get("id") == (device or 0) and "totalGlobalMem" in p:
            return int(p["totalGlobalMem"])
    return None


def _launches_per_step(trace: RankTrace, n_steps: int) -> float | None:
    lo, hi = (trace.steps[0][1], trace.steps[-1][2]) if trace.steps else (float("-inf"), float("inf"))
    ops = [g for g in trace.gpu if g[2] == "kernel" and lo <= g[0] <= hi]
    return len(ops) / n_steps if n_steps else None

"""Kernel launch latency and many small kernels.

For each kernel that starts in the window (outside the time set aside), on every device of the rank: the delay from the
end of the runtime call that launched it (``cudaLaunchKernel``, ``cuLaunchKernel``, ``hipLaunchKernel``...) to the
kernel's start, as HTA documents it; kernels of a CUDA graph replay have no such call of their own and are left out.
A kernel that started before its call returned (the call's end is recorded after the driver queued the work) waited
nothing after it: its delay is 0, never negative (HTA's ``get_cuda_kernel_launch_stats`` code computes
``kernel start - call start + call duration``, two call durations above the delay its documentation defines).

On a busy device that delay is queue depth, not launch cost: a kernel launched while earlier work still ran starts
when that work ends. Such a kernel is counted as *queued* (the device's previous op ended after the launch call and
within ``timeline.SLACK_US`` of the kernel's start); ``queued_fraction`` is their share, and ``idle_p50_us`` the median
delay of the others, the kernels that found the device free: that one is the launch cost.

Also the duration of the launch calls themselves, and the kernels shorter than ``SMALL_US``: how many, and their
share of all kernel time (the "cheap but called very often" operators). Percentiles: the median, and the 95th by
nearest rank.
"""

from __future__ import annotations

from typing import Any

from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.timeline import SLACK_US, Timeline
from perf_callbacks.analysis.trace.window import InWindow, p50, p95

SMALL_US = 10.0
"""A kernel shorter than this is small."""


def launch(trace: RankTrace, tl: Timeline) -> dict[str, Any] | None:
    """``{p50_us, p95_us, idle_p50_us, queued_fraction, launch_call_p50_us, small_kernels, small_kernel_fraction}``.

    None without kernels. The latencies are None when no kernel's launch call is in the trace (a trace without CPU
    activity); ``idle_p50_us`` is None when every kernel queued.
    """
    keep = InWindow.of(tl)
    calls = trace.extra.launch_calls
    delays: list[float] = []
    idle: list[float] = []
    small, small_us, kernel_us = 0, 0.0, 0.0
    busy_until: dict[Any, float] = {}  # per device: the latest end of its ops so far (any kind, in start order)
    for ts, end, kind, _name, dev, corr, _ext in trace.gpu:
        before = busy_until.get(dev, float("-inf"))
        busy_until[dev] = max(before, end)
        if kind != "kernel" or not keep(ts):
            continue
        dur = end - ts
        kernel_us += dur
        if dur < SMALL_US:
            small += 1
            small_us += dur
        call = calls.get(corr) if isinstance(corr, (int, str)) else None
        if call is not None:
            returned = call[0] + call[1]
            delay = max(ts - returned, 0.0)  # started before its call returned: it waited nothing after it
            delays.append(delay)
            if not (returned < before and abs(ts - before) <= SLACK_US):  # else it queued behind earlier work
                idle.append(delay)
    if kernel_us == 0.0 and not small:
        return None
    durations = [dur for ts, dur in calls.values() if keep(ts)]
    return {"p50_us": p50(delays), "p95_us": p95(delays), "idle_p50_us": p50(idle),
            "queued_fraction": 1 - len(idle) / len(delays) if delays else None,
            "launch_call_p50_us": p50(durations),
            "small_kernels": small, "small_kernel_fraction": small_us / kernel_us if kernel_us > 0 else 0.0}


def combine(per_rank: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Several ranks: the median over ranks of each latency, the small kernels summed, their share averaged."""
    if not per_rank:
        return None
    if len(per_rank) == 1:
        return dict(per_rank[0])
    out: dict[str, Any] = {}
    for key in ("p50_us", "p95_us", "idle_p50_us", "queued_fraction", "launch_call_p50_us"):
        out[key] = p50([r[key] for r in per_rank if r.get(key) is not None])
    out["small_kernels"] = sum(r["small_kernels"] for r in per_rank)
    out["small_kernel_fraction"] = sum(r["small_kernel_fraction"] for r in per_rank) / len(per_rank)
    return out

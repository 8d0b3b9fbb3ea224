"""Top operators: self device time attributed to the launching CPU op through ``External id``, or self CPU time.

Annotation spans (``ProfilerStep#N``, ``record_function`` names, ``gpu_user_annotation``) are never counted: they are
not ops, and torch's ``key_averages()`` shows ``train_step`` at thousands of percent of self CUDA time because of them.

The ``External id`` is checked against the launch: the kernel's correlation id leads to the runtime call that launched
it, and the op named by the ``External id`` must enclose that call on its thread. Where it does not (a rewritten trace,
such as an execution-trace replay, whose ids were renumbered), the innermost op enclosing the launch is the one
charged. A device op whose id names no op at all (older traces carry the correlation id there) keeps its own name.
Kernels launched straight from a ``torch.compile`` region (Triton kernels, whose launcher is no operator) are listed
by their own name: the region itself is a wrapper, not an op to speed up.
On a CPU-only trace, an op's self time leaves out the CUPTI range profiler's kernel replays inside it (its launch
calls, set aside as ``aside.REPLAYS``): profiler time, not the op's. Other time set aside still counts here.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from typing import Any

from perf_callbacks.analysis.trace.aside import REPLAYS
from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.intervals import clip, total, union
from perf_callbacks.analysis.trace.schema import COPY_KINDS, OP_THREAD, copy_kind


def top_ops(trace: RankTrace, k: int = 10) -> list[dict[str, Any]]:
    """Return the ``k`` ops with the most self time: device time on GPU traces, CPU time on CPU-only traces.

    Returns:
        Dicts with ``name``, ``self_time_us``, ``fraction`` (of all self time counted), ``device`` and ``count``.
    """
    if trace.has_gpu:
        times, counts = _device_self_times(trace)
        device = trace.device_kind
    else:
        times, counts = _cpu_self_times(trace)
        device = "cpu"
    grand = sum(times.values()) or 1.0
    ranked = sorted(times.items(), key=lambda kv: -kv[1])[:k]
    return [
        {"name": n, "self_time_us": round(t, 3), "fraction": t / grand, "device": device, "count": counts[n]}
        for n, t in ranked
    ]


def copy_times(trace: RankTrace, device: int | None = None) -> dict[str, float]:
    """Memcpy and memset microseconds by direction and host memory kind, e.g. ``HtoD/pageable``, ``memset``."""
    out: dict[str, float] = defaultdict(float)
    for ts, end, kind, name, dev, *_ in trace.gpu:
        if kind in COPY_KINDS and (device is None or dev == device):
            out[copy_kind(kind, name)] += end - ts
    return dict(out)


def top_kernels(trace: RankTrace, device: int, k: int = 5) -> list[dict[str, Any]]:
    """Return the ``k`` kernels (by name) with the most time on ``device``, with their share of its busy time."""
    times: dict[str, float] = defaultdict(float)
    for ts, end, kind, name, dev, *_ in trace.gpu:
        if dev == device and kind == "kernel":
            times[name] += end - ts
    grand = sum(times.values()) or 1.0
    ranked = sorted(times.items(), key=lambda kv: -kv[1])[:k]
    return [{"name": n, "time_us": round(t, 3), "fraction": t / grand} for n, t in ranked]


COMPILED_WRAPPERS = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph", "## Call Compiled")
"""Names of the ``torch.compile`` spans that wrap the kernels they launch (not operators themselves)."""
_SLACK_US = 1.0
_MAX_WALK = 4096
Threads = dict[Any, tuple[list[float], list[tuple[float, float, Any, str]]]]
"""Each thread's cpu ops sorted by start (and their starts), built when first needed."""


def _device_self_times(trace: RankTrace) -> tuple[dict[str, float], dict[str, int]]:
    times: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    threads: Threads = {}
    for ts, end, _kind, name, _dev, corr, ext in trace.gpu:
        op = launching_op(trace, corr, ext, threads) or name
        if op.startswith(COMPILED_WRAPPERS):
            op = name
        times[op] += end - ts
        counts[op] += 1
    return times, counts


def launching_op(trace: RankTrace, corr: Any, ext: Any, threads: Threads | None = None) -> str | None:
    """The CPU op that launched a device op (None when its ``External id`` names no op).

    That is the op of its ``External id`` when it encloses the launch (found by the correlation id) on the launching
    thread, else the innermost op enclosing the launch there, else the op of its ``External id``.
    """
    launch = trace.launches.get(corr)
    if ext == -1 and launch is not None:
        ext = launch[1]
    named = trace.ext_names.get(ext)
    if launch is None or named is None:  # an id that names no op (older traces: the correlation id): the kernel's name
        return named
    tid = trace.launch_tids.get(corr)
    span = trace.ext_spans.get(ext)
    if span is not None and span[2] == tid and span[0] - _SLACK_US <= launch[0] <= span[1] + _SLACK_US:
        return named
    return _enclosing(trace, tid, launch[0], {} if threads is None else threads) or named


def _enclosing(trace: RankTrace, tid: Any, t: float, threads: Threads) -> str | None:
    """The innermost cpu op on thread ``tid`` whose span holds ``t`` (ops nest, so the latest-starting one)."""
    if tid not in threads:
        ops = sorted((o for o in trace.cpu_ops if o[OP_THREAD] == tid), key=lambda o: (o[0], -o[1]))
        threads[tid] = ([o[0] for o in ops], ops)
    starts, ops = threads[tid]
    i = bisect_right(starts, t + _SLACK_US)
    for _ts, end, _tid, name in reversed(ops[max(i - _MAX_WALK, 0) : i]):
        if end + _SLACK_US >= t:
            return str(name)
    return None


def _cpu_self_times(trace: RankTrace) -> tuple[dict[str, float], dict[str, int]]:
    """Self time of each cpu_op.

    Its duration minus that of its direct children on the same thread (kernel replays left out of both).
    """
    times: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    by_thread: dict[Any, list[tuple[float, float, Any, str]]] = defaultdict(list)
    for op in trace.cpu_ops:
        by_thread[op[OP_THREAD]].append(op)
    aside = union((a, b) for a, b, kind in trace.aside_spans if kind == REPLAYS)

    def kept(a: float, b: float) -> float:
        return b - a - total(clip(aside, a, b)) if aside else b - a

    for ops in by_thread.values():
        ops.sort(key=lambda o: (o[0], -o[1]))
        stack: list[list[Any]] = []
        for ts, end, _tid, name in ops:
            while stack and stack[-1][1] <= ts:
                _close(stack.pop(), times)
            if stack:
                stack[-1][2] -= kept(ts, min(end, stack[-1][1]))
            stack.append([ts, end, kept(ts, end), name])
            counts[name] += 1
        while stack:
            _close(stack.pop(), times)
    return times, counts


def _close(frame: list[Any], times: dict[str, float]) -> None:
    times[frame[3]] += max(frame[2], 0.0)

"""The op table behind ``report --sort``: self device time, self CPU time, calls and self memory of each op.

One walk over each thread's ops (sorted by start, parents before children) gives every op's self CPU time (its
duration less that of its direct children) and the innermost op around each memory event of that thread (the op that
allocated or freed), as ``torch.profiler``'s ``key_averages()`` attributes ``self_*_memory_usage``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from operator import itemgetter
from typing import Any

from perf_callbacks.analysis.measures.ops import _device_self_times
from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.schema import OP_NAME, OP_THREAD

SORT_KEYS = {"device_time": "device_time_us", "self_cpu": "self_cpu_us", "calls": "calls",
             "memory": "self_memory_bytes"}
"""``report --sort`` choices and the op-table column each sorts by (largest first)."""

Op = tuple[float, float, Any, str]
_INF = float("inf")
MemoryAt = tuple[float, Any]
"""``(ts, tid)`` of a memory event."""


def walk(trace: RankTrace, memory: list[MemoryAt]) -> tuple[dict[str, float], dict[str, int], list[str | None]]:
    """Self CPU microseconds and calls of every op, and the innermost op around each memory event (None: no op)."""
    times: dict[str, float] = defaultdict(float)
    by_thread: dict[Any, list[Op]] = defaultdict(list)
    try:
        for op in trace.cpu_ops:
            by_thread[op[OP_THREAD]].append(op)
    except TypeError:  # a damaged tid (a list, a dict): threads told apart by its text
        by_thread.clear()
        for op in trace.cpu_ops:
            by_thread[_hashable(op[OP_THREAD])].append(op)
    mem_by_thread: dict[Any, list[tuple[float, int]]] = defaultdict(list)
    for i, (ts, tid) in enumerate(memory):
        mem_by_thread[_hashable(tid)].append((ts, i))
    owners: list[str | None] = [None] * len(memory)
    for tid, ops in by_thread.items():
        mems = sorted(mem_by_thread.pop(tid, []))
        ops.sort()
        if not _walk(ops, mems, times, owners, check=True):  # a parent sorted after its child: sort strictly
            ops.sort(key=lambda o: (o[0], -o[1]))
            _walk(ops, mems, times, owners, check=False)
    return dict(times), dict(Counter(map(itemgetter(OP_NAME), trace.cpu_ops))), owners


def op_table(trace: RankTrace, self_cpu: dict[str, float], calls: dict[str, int], memory: dict[str, int],
             k: int) -> list[dict[str, Any]]:
    """The ops in the top ``k`` by any sort key: ``{name, device_time_us, self_cpu_us, calls, self_memory_bytes}``.

    ``device_time_us`` is None on a trace without device activity. An op that only a kernel names (no CPU op
    launched it) has the kernel count as its calls.
    """
    device, kernels = _device_self_times(trace) if trace.has_gpu else ({}, {})
    names = set(device) | set(self_cpu) | set(memory)
    rows: dict[str, dict[str, Any]] = {
        n: {"name": n, "device_time_us": device.get(n, 0.0) if trace.has_gpu else None,
            "self_cpu_us": self_cpu.get(n, 0.0), "calls": calls.get(n, kernels.get(n, 0)),
            "self_memory_bytes": memory.get(n, 0)} for n in names}
    keep: set[str] = set()
    for column in SORT_KEYS.values():
        keep.update(sorted(rows, key=lambda n: -(rows[n][column] or 0))[:k])
    return sorted((rows[n] for n in keep), key=lambda r: -(r["device_time_us"] or r["self_cpu_us"]))


def combine(per_rank: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Op tables of several ranks summed by name."""
    merged: dict[str, dict[str, Any]] = {}
    for rows in per_rank:
        for r in rows:
            m = merged.setdefault(r["name"], {"name": r["name"], "device_time_us": None, "self_cpu_us": 0.0,
                                              "calls": 0, "self_memory_bytes": 0})
            if r["device_time_us"] is not None:
                m["device_time_us"] = (m["device_time_us"] or 0.0) + r["device_time_us"]
            for key in ("self_cpu_us", "calls", "self_memory_bytes"):
                m[key] += r[key]
    return sorted(merged.values(), key=lambda r: -(r["device_time_us"] or r["self_cpu_us"]))


def sorted_ops(rows: list[dict[str, Any]], sort: str) -> list[dict[str, Any]]:
    """The rows by ``sort`` (a ``SORT_KEYS`` choice), largest first; ties by self device, then CPU, time."""
    column = SORT_KEYS[sort]
    return sorted(rows, key=lambda r: (-(r[column] or 0), -(r["device_time_us"] or 0), -r["self_cpu_us"]))


def _walk(ops: list[Op], mems: list[tuple[float, int]], times: dict[str, float], owners: list[str | None],
          check: bool) -> bool:
    """One thread; False (and nothing counted) when ``check`` finds an op that ends after the op it starts in.

    The stack holds ``[end, name, self time so far]`` of the ops open at the current time (a hot loop: kept flat).
    """
    stack: list[list[Any]] = []
    found: list[tuple[int, str | None]] = []
    local: dict[str, float] = defaultdict(float)
    mi, next_mem = 0, mems[0][0] if mems else _INF
    for ts, end, _tid, name in ops:
        while next_mem < ts:
            _close(stack, next_mem, local)
            found.append((mems[mi][1], stack[-1][1] if stack else None))
            mi += 1
            next_mem = mems[mi][0] if mi < len(mems) else _INF
        while stack and stack[-1][0] <= ts:
            f = stack.pop()
            local[f[1]] += f[2] if f[2] > 0 else 0.0
        if stack:
            top = stack[-1]
            if check and end > top[0]:
                return False
            top[2] -= (end if end < top[0] else top[0]) - ts
        stack.append([end, name, end - ts])
    for mts, idx in mems[mi:]:
        _close(stack, mts, local)
        found.append((idx, stack[-1][1] if stack else None))
    _close(stack, _INF, local)
    for key, own in local.items():
        times[key] += own
    for idx, owner in found:
        owners[idx] = owner
    return True


def _hashable(tid: Any) -> Any:
    return tid if isinstance(tid, (int, str, float, type(None))) else repr(tid)


def _close(stack: list[list[Any]], t: float, local: dict[str, float]) -> None:
    """Pop the ops that ended by ``t``, adding their self time."""
    while stack and stack[-1][0] <= t:
        f = stack.pop()
        local[f[1]] += f[2] if f[2] > 0 else 0.0

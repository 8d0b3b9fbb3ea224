"""Memory by operator and over time, from the ``[memory]`` events of ``profile_memory=True``.

Device memory events are used (``Device Type`` other than 0); a trace without device activity uses the host's (type
0) instead. Each event's ``Bytes`` (negative for a free) goes to the innermost op around it on its thread, as
``key_averages()`` counts ``self_cuda_memory_usage``: an op's self bytes are what it allocated less what it freed.
Events outside any op are counted under ``OUTSIDE``. Self bytes are not what an op holds: an allocation freed by
another op (or outside any op) stays in its self bytes, so they can sum past the peak. What is held is read at the
peak instead: the largest ``Total Allocated``, with the op of the event that reached it, and the allocations still
alive then (matched to their frees by ``Addr``) by the op that made them, the rest being memory allocated before the
trace began (``BEFORE``: parameters, optimizer state, tensors of earlier steps). The curve is ``Total Allocated``
over the window, at most ``CURVE_POINTS`` points (the largest value in each slice of time, so the peak stays on it).
Every figure covers the whole trace, as ``key_averages()`` does.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.extra_events import Memory
from perf_callbacks.analysis.trace.timeline import Timeline
from perf_callbacks.analysis.trace.window import number

OUTSIDE = "(outside any op)"
BEFORE = "(allocated before the trace)"
HELD_ROWS = 5
CURVE_POINTS = 300


def memory_events(trace: RankTrace) -> tuple[list[Memory], str | None]:
    """The events the figures use, in time order, and which memory they describe (``device``, ``host`` or None)."""
    device = [m for m in trace.extra.memory if isinstance(m[4], int) and m[4] != 0 and _valid(m)]
    if device:
        return sorted(device, key=lambda m: m[0]), "device"
    host = [m for m in trace.extra.memory if m[4] == 0 and _valid(m)] if not trace.has_gpu else []
    return sorted(host, key=lambda m: m[0]), "host" if host else None


def by_op(events: list[Memory], owners: list[str | None], calls: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Op name -> ``{name, self_bytes, calls}`` (calls: the op's calls, or the events outside any op)."""
    out: dict[str, dict[str, Any]] = {}
    sums: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for event, owner in zip(events, owners, strict=True):
        name = owner or OUTSIDE
        sums[name] += event[2]
        counts[name] += 1
    for name, total in sums.items():
        out[name] = {"name": name, "self_bytes": total, "calls": calls.get(name, counts[name])}
    return out


def top_by_op(rows: dict[str, dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The ``k`` ops with the most self bytes."""
    return sorted(rows.values(), key=lambda r: (-r["self_bytes"], r["name"]))[:k]


def peak(events: list[Memory], owners: list[str | None], tl: Timeline, kind: str | None) -> dict[str, Any] | None:
    """``{bytes, op, ts_ms, memory}``: the largest ``Total Allocated``, its op and its time from the window's start.

    The first event to reach the peak counts; None without events.
    """
    if not events:
        return None
    i = max(range(len(events)), key=lambda j: (events[j][3], -j))
    return {"bytes": events[i][3], "op": owners[i] or OUTSIDE, "ts_ms": (events[i][0] - tl.lo) / 1e3,
            "memory": kind, "held_by_op": held_at(events, owners, i)}


def held_at(events: list[Memory], owners: list[str | None], i: int) -> list[dict[str, Any]] | None:
    """What is allocated at event ``i``: ``[{name, bytes}]`` by the op that made each live allocation, largest first.

    Allocations are matched to their frees by address; memory live at ``i`` that no event of the trace allocated is
    ``BEFORE``. The ``HELD_ROWS`` largest rows are kept. None when the events carry no ``Addr``.
    """
    live: dict[Any, tuple[int, str]] = {}
    for event, owner in zip(events[: i + 1], owners[: i + 1], strict=True):
        addr, nbytes = event[5] if len(event) > 5 else None, event[2]
        if addr is None:
            return None
        if nbytes > 0:
            live[addr] = (nbytes, owner or OUTSIDE)
        elif nbytes < 0:
            live.pop(addr, None)
    held: dict[str, int] = defaultdict(int)
    for nbytes, name in live.values():
        held[name] += nbytes
    before = events[i][3] - sum(held.values())
    if before > 0:
        held[BEFORE] += before
    rows = sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))[:HELD_ROWS]
    return [{"name": name, "bytes": nbytes} for name, nbytes in rows]


def curve(events: list[Memory], tl: Timeline) -> list[list[float]]:
    """``[ms from the window start, bytes allocated]`` over the window.

    Each of at most ``CURVE_POINTS`` slices of time keeps its largest value.
    """
    inside = [m for m in events if tl.lo <= m[0] <= tl.hi]
    if not inside:
        return []
    width = (tl.hi - tl.lo) / CURVE_POINTS or 1.0
    best: dict[int, Memory] = {}
    for m in inside:
        s = min(int((m[0] - tl.lo) / width), CURVE_POINTS - 1)
        if s not in best or m[3] > best[s][3]:
            best[s] = m
    return [[(m[0] - tl.lo) / 1e3, float(m[3])] for _, m in sorted(best.items())]


def combine_by_op(per_rank: list[list[dict[str, Any]]], k: int) -> list[dict[str, Any]]:
    """Rows of several ranks summed by op name; the top ``k``."""
    merged: dict[str, dict[str, Any]] = {}
    for rows in per_rank:
        for r in rows:
            m = merged.setdefault(r["name"], {"name": r["name"], "self_bytes": 0, "calls": 0})
            m["self_bytes"] += r["self_bytes"]
            m["calls"] += r["calls"]
    return top_by_op(merged, k)


def _valid(m: Memory) -> bool:
    return isinstance(m[2], int) and not isinstance(m[2], bool) and number(m[3]) is not None

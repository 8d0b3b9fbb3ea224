"""Collectives: count, time, exposed time, message bytes and bandwidth per collective and process group.

Bandwidths follow nccl-tests (``doc/PERFORMANCE.md`` there): ``algbw = bytes / time`` and ``busbw = algbw x factor``,
the factor being ``2(n-1)/n`` for AllReduce, ``(n-1)/n`` for AllGather (bytes = output), ReduceScatter (bytes =
input), AllToAll, Gather and Scatter, and ``1`` for Broadcast, Reduce and send/recv, on a group of ``n`` ranks. A group
of one moves no data: its busbw is 0.

The calls come from the NCCL kernels on the rank's device (their own arguments, else those of the
``record_param_comms`` op that launched them); on a trace without NCCL kernels, from the host's ``gloo:`` spans, sized
from their ``Input Dims`` (``record_shapes=True``). A call without a size is counted and timed, and gets no bandwidth.
``nccl:`` host spans alone time only the host's enqueue: they are counted, never turned into a bandwidth.
Exposed time is the part of the calls that the timeline labels ``communication`` (not overlapped by compute).
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median
from typing import Any

from perf_callbacks.analysis.events import RankTrace, collective_name, nccl_collective
from perf_callbacks.analysis.extra_events import Nccl
from perf_callbacks.analysis.intervals import Span, clip, intersect, total, union
from perf_callbacks.analysis.measure_base import InWindow, element_bytes, gbps, number, tensor_bytes
from perf_callbacks.analysis.timeline import Timeline

OUTPUT_SIZED = ("AllGather", "Gather")
"""Collectives whose message size is their output (nccl-tests); every other one is sized by its input."""
NO_SIZE = "collectives without a message size in the trace (an older torch; gloo without record_shapes=True, or a " \
          "gloo collective other than all_reduce, broadcast and reduce): counts and times only, no bandwidth"
HOST_ONLY = "nccl collectives seen only on the host (no NCCL kernel traced): their time is the host's enqueue, not " \
            "the transfer; no bandwidth"
GROUP_OF_ONE = "a collective on a group of one rank moves no data: its busbw is 0"

Call = tuple[str, str | None, int | None, float, float, int | None]
"""``(collective, group, group size, start, end, bytes)``."""


def bus_factor(name: str, n: int | None) -> float | None:
    """nccl-tests' busbw / algbw for collective ``name`` on ``n`` ranks; None when unknown.

    Example:
        >>> bus_factor("AllReduce", 8), bus_factor("AllGather", 4), bus_factor("Broadcast", 2), bus_factor("x", 2)
        (1.75, 0.75, 1.0, None)
    """
    if n is None or n < 1:
        return None
    if n == 1:
        return 0.0
    if name == "AllReduce":
        return 2 * (n - 1) / n
    if name in ("AllGather", "ReduceScatter", "AllToAll", "Gather", "Scatter"):
        return (n - 1) / n
    if name in ("Broadcast", "Reduce", "Send", "Recv", "SendRecv"):
        return 1.0
    return None


def communication(trace: RankTrace, tl: Timeline) -> tuple[list[dict[str, Any]], float | None, list[str]]:
    """Per (collective, group, group size): the figures of one rank; the overlap share; notes.

    Returns:
        Rows ``{name, group, count, bytes, total_ms, exposed_ms, algbw_gbps, busbw_gbps, group_size,
        busbw_p50_gbps}`` (``bytes`` summed over the calls, None when a call has no size; bandwidths in 1e9 bytes/s,
        aggregates as total bytes / total time), most time first; ``overlap_fraction`` (the share of collective time
        overlapped by compute, None without collectives); and notes on what could not be measured.
    """
    keep = InWindow.of(tl)
    calls, notes = _device_calls(trace, tl.device, keep)
    if not calls:
        calls, notes = _host_calls(trace, keep)
    if not calls:
        return [], None, []
    exposed_spans = [(a, b) for a, b, cause in tl.segments if cause == "communication"]
    by_key: dict[tuple[str, str | None, int | None], list[Call]] = defaultdict(list)
    for call in calls:
        by_key[call[:3]].append(call)
    rows = [_row(key, group, exposed_spans) for key, group in by_key.items()]
    rows.sort(key=lambda r: -r["total_ms"])
    every = clip(union((c[3], c[4]) for c in calls), tl.lo, tl.hi)
    overlap = 1.0 - total(intersect(every, exposed_spans)) / total(every) if total(every) > 0 else None
    if any(r["group_size"] == 1 for r in rows):
        notes.append(GROUP_OF_ONE)
    return rows, overlap, notes


def combine(per_rank: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows of several ranks summed per (collective, group, group size); bandwidths from the sums.

    ``busbw_p50_gbps`` is the median of the ranks' medians.
    """
    merged: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for rows in per_rank:
        for r in rows:
            merged[(r["name"], r["group"], r["group_size"])].append(r)
    out = []
    for (name, group, n), rows in merged.items():
        sizes = [r["bytes"] for r in rows]
        nbytes = None if any(s is None for s in sizes) else sum(sizes)
        ms = sum(r["total_ms"] for r in rows)
        p50s = [r["busbw_p50_gbps"] for r in rows if r["busbw_p50_gbps"] is not None]
        out.append(_figures(name, group, n, sum(r["count"] for r in rows), nbytes, ms,
                            sum(r["exposed_ms"] for r in rows), median(p50s) if p50s else None))
    return sorted(out, key=lambda r: -r["total_ms"])


def _row(key: tuple[str, str | None, int | None], calls: list[Call], exposed: list[Span]) -> dict[str, Any]:
    name, group, n = key
    sizes = [c[5] for c in calls]
    nbytes = None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)
    time_us = sum(c[4] - c[3] for c in calls)
    exposed_us = total(intersect(union((c[3], c[4]) for c in calls), exposed))
    factor = bus_factor(name, n)
    per_call = [s / (c[4] - c[3]) / 1e3 * factor for c, s in zip(calls, sizes, strict=True)
                if s is not None and factor is not None and c[4] > c[3]]
    return _figures(name, group, n, len(calls), nbytes, time_us / 1e3, exposed_us / 1e3,
                    median(per_call) if per_call else None)


def _figures(name: str, group: str | None, n: int | None, count: int, nbytes: int | None, ms: float,
             exposed_ms: float, busbw_p50: float | None) -> dict[str, Any]:
    algbw = gbps(nbytes, ms * 1e3)
    factor = bus_factor(name, n)
    busbw = None if algbw is None or factor is None else algbw * factor
    return {"name": name, "group": group, "count": count, "bytes": nbytes, "total_ms": ms, "exposed_ms": exposed_ms,
            "algbw_gbps": algbw, "busbw_gbps": busbw, "group_size": n, "busbw_p50_gbps": busbw_p50}


def _device_calls(trace: RankTrace, device: int | None, keep: InWindow) -> tuple[list[Call], list[str]]:
    extra = trace.extra
    calls: list[Call] = []
    for k in extra.nccl:
        if k[2] != device or not keep(k[0]):
            continue
        ext = _external_id(trace, k) if k[4] is None else None
        args = k[4] if k[4] is not None else extra.param_comms.get(ext) if isinstance(ext, (int, str)) else None
        calls.append(_nccl_call(k, args))
    return calls, [NO_SIZE] if any(c[5] is None for c in calls) else []


def _external_id(trace: RankTrace, k: Nccl) -> Any:
    ext, corr = k[5], k[6]
    if ext not in (-1, None) or not isinstance(corr, int):
        return ext
    return trace.launches.get(corr, (0.0, -1))[1]


def _nccl_call(k: Nccl, args: dict[str, Any] | None) -> Call:
    if args is None:
        return nccl_collective(k[3]) or "other", None, None, k[0], k[1], None
    name = collective_name(str(args.get("Collective name")))
    nelems = number(args.get("Out msg nelems" if name in OUTPUT_SIZED else "In msg nelems"))
    size = element_bytes(args.get("dtype"))
    group = args.get("Process Group Description") or args.get("Process Group Name")
    nbytes = nelems * size if nelems is not None and size is not None else None
    return name, None if group is None else str(group), number(args.get("Group size")), k[0], k[1], nbytes


def _host_calls(trace: RankTrace, keep: InWindow) -> tuple[list[Call], list[str]]:
    group, n = _only_group(trace.meta.get("distributedInfo"))
    calls: list[Call] = []
    notes: set[str] = set()
    for ts, end, span, dims, types in trace.extra.host_comms:
        if not keep(ts):
            continue
        name = collective_name(span.split(":", 1)[-1])
        nbytes = _span_bytes(name, dims, types) if span.startswith("gloo:") else None
        if nbytes is None:
            notes.add(NO_SIZE if span.startswith("gloo:") else HOST_ONLY)
        calls.append((name, group, n, ts, end, nbytes))
    return calls, sorted(notes)


def _span_bytes(name: str, dims: Any, types: Any) -> int | None:
    """Bytes of a gloo span's single tensor: for collectives whose input is their output (one tensor in and out)."""
    if name not in ("AllReduce", "Broadcast", "Reduce") or not isinstance(dims, list) or not isinstance(types, list):
        return None
    if len(dims) != 1 or len(types) != 1:
        return None
    return tensor_bytes(dims[0], types[0])


def _only_group(info: Any) -> tuple[str | None, int | None]:
    """The process group and its size when ``distributedInfo`` names exactly one (host spans do not say which)."""
    if not isinstance(info, dict):
        return None, None
    groups = info.get("pg_config")
    if isinstance(groups, list) and len(groups) == 1 and isinstance(groups[0], dict):
        g = groups[0]
        name = g.get("pg_desc") or g.get("pg_name")
        return None if name is None else str(name), number(g.get("pg_size"))
    return None, None

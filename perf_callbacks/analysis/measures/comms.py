"""Collectives: count, time, exposed time, message bytes and bandwidth per collective and process group.

Bandwidths follow nccl-tests (``doc/PERFORMANCE.md`` there): ``algbw = bytes / time`` and ``busbw = algbw x factor``,
the factor being ``2(n-1)/n`` for AllReduce, ``(n-1)/n`` for AllGather (bytes = output), ReduceScatter (bytes =
input), AllToAll, Gather and Scatter, and ``1`` for Broadcast, Reduce and send/recv, on a group of ``n`` ranks. A group
of one moves no data: its busbw is 0.

The calls come from the NCCL kernels on the rank's device (their own arguments, else those of the
``record_param_comms`` op that launched them, else, on an older torch, the ``nccl:<collective>`` host annotation whose
span holds the kernel's launch call on the same thread: its name, and its size from its ``Input Dims``/``Input type``;
an all-to-all runs as a ``SendRecv`` kernel and is named by the annotation; an AllGather, whose output is its
input times the ranks, by the ``c10d::_allgather_base_`` op around the annotation: its output tensor, and output /
input ranks); on a trace without NCCL kernels, from
the host's ``gloo:`` spans, sized from their ``Input Dims`` (``record_shapes=True``). A call without a size is counted
and timed, and gets no bandwidth.
``nccl:`` host spans alone time only the host's enqueue: they are counted, never turned into a bandwidth.
Exposed time is the part of the calls that the timeline labels ``communication`` (not overlapped by compute).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median
from typing import Any

from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.extra_events import (
    HOST_COMM_DIMS,
    HOST_COMM_NAME,
    HOST_COMM_THREAD,
    HOST_COMM_TYPES,
    NCCL_ARGS,
    NCCL_CORRELATION,
    NCCL_DEVICE,
    NCCL_EXTERNAL_ID,
    NCCL_NAME,
    HostComm,
    Nccl,
)
from perf_callbacks.analysis.trace.intervals import Holders, Span, clip, intersect, total, union
from perf_callbacks.analysis.trace.schema import collective_name, nccl_collective
from perf_callbacks.analysis.trace.timeline import Timeline
from perf_callbacks.analysis.trace.window import InWindow, element_bytes, gbps, number, tensor_bytes

OUTPUT_SIZED = ("AllGather", "Gather")
"""Collectives whose message size is their output (nccl-tests); every other one is sized by its input."""
NO_SIZE = "collectives without a message size in the trace (an older torch; gloo without record_shapes=True, or a " \
          "gloo collective other than all_reduce, broadcast and reduce): counts and times only, no bandwidth"
GLOO_SIZED = ("AllReduce", "Broadcast", "Reduce")
"""Collectives whose input is their output (one tensor in and out): a gloo span's ``Input Dims`` size them."""
HOST_ONLY = "nccl collectives seen only on the host (no NCCL kernel traced): their time is the host's enqueue, not " \
            "the transfer; no bandwidth"
GATHER_UNSIZED = "AllGather sized by its nccl: host annotation needs the group size (its output is its input times " \
                 "the ranks), which the trace does not give: no bandwidth"
ANNOTATION_SIZED = ("AllReduce", "Broadcast", "Reduce", "ReduceScatter", "AllToAll")
"""Collectives that an ``nccl:`` annotation's one input tensor sizes (nccl-tests: their input)."""
BEFORE_WINDOW = "collectives launched before the window (their launch and the op that sized them are not in the " \
                "trace): counts and times only, no bandwidth"
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
    mine = [k for k in extra.nccl if k[NCCL_DEVICE] == device and keep(k[0])]
    calls: list[Call] = []
    notes: set[str] = set()
    annotated = _annotations(trace, mine)
    first = min((ts for ts, _ in trace.launches.values()), default=None)
    group, n = _only_group(trace.meta.get("distributedInfo"))
    for k in mine:
        own = k[NCCL_ARGS]
        ext = _external_id(trace, k) if own is None else None
        args = own if own is not None else extra.param_comms.get(ext) if isinstance(ext, (int, str)) else None
        span = annotated.get(id(k)) if args is None else None
        call = _nccl_call(k, args) if span is None else _annotated_call(k, span, group, n)
        if call[0] == "AllGather" and call[5] is None and span is not None:
            call = _gathered(trace, k, call)
        if call[5] is None:
            notes.add(GATHER_UNSIZED if span is not None and call[0] == "AllGather" and n is None
                      else BEFORE_WINDOW if args is None and _before(trace, k, keep.lo, first) else NO_SIZE)
        calls.append(call)
    return calls, sorted(notes)


def _annotations(trace: RankTrace, kernels: list[Nccl]) -> dict[int, HostComm | None]:
    """Each kernel's ``nccl:`` host annotation: the span that holds its launch call on the launching thread.

    An annotation holding the launches of several NCCL kernels cannot say which moved what: those kernels map to None.
    """
    spans: dict[Any, list[HostComm]] = defaultdict(list)
    for h in trace.extra.host_comms:
        if h[HOST_COMM_NAME].startswith("nccl:"):
            spans[h[HOST_COMM_THREAD]].append(h)
    if not spans:
        return {}
    found: dict[int, HostComm] = {}
    holders = {tid: Holders(rows) for tid, rows in spans.items()}
    for k in kernels:
        corr = k[NCCL_CORRELATION]
        launched = trace.launches.get(corr) if isinstance(corr, int) else None
        holder = holders.get(trace.launch_tids.get(corr)) if launched is not None else None
        if holder is not None:
            span = holder.at(launched[0])
            if span is not None:
                found[id(k)] = span
    uses = Counter(id(s) for s in found.values())
    return {key: span if uses[id(span)] == 1 else None for key, span in found.items()}


def _holding(spans: list[HostComm], ts: float) -> HostComm | None:
    """The latest-starting span that holds ``ts``."""
    inside = [s for s in spans if s[0] <= ts <= s[1]]
    return max(inside, key=lambda s: s[0]) if inside else None


def _annotated_call(k: Nccl, span: HostComm, group: str | None, n: int | None) -> Call:
    """A kernel named and sized by its ``nccl:`` annotation (AllGather: its input times the group size)."""
    name = collective_name(span[HOST_COMM_NAME].split(":", 1)[-1].strip("_"))
    nbytes = _span_bytes(name, span[HOST_COMM_DIMS], span[HOST_COMM_TYPES], ANNOTATION_SIZED + ("AllGather",))
    if name == "AllGather":
        nbytes = None if nbytes is None or n is None else nbytes * n
    return name, group, n, k[0], k[1], nbytes


def _gathered(trace: RankTrace, k: Nccl, call: Call) -> Call:
    """An annotated AllGather sized by the ``c10d::_allgather_base_`` op that holds its launch.

    That op's output tensor is the size, output / input the group size; ``call`` unchanged without such an op.
    """
    corr = k[NCCL_CORRELATION]
    launched = trace.launches.get(corr) if isinstance(corr, int) else None
    ops = [g for g in trace.extra.gather_ops if g[HOST_COMM_THREAD] == trace.launch_tids.get(corr)]
    op = _holding(ops, launched[0]) if launched is not None and ops else None
    dims, types = (op[HOST_COMM_DIMS], op[HOST_COMM_TYPES]) if op is not None else (None, None)
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) < 2 or len(types) < 2:
        return call
    out, inp = tensor_bytes(dims[0], types[0]), tensor_bytes(dims[1], types[1])
    if not out or not inp or out % inp:
        return call
    return call[0], call[1], call[2] or out // inp, call[3], call[4], out


def _before(trace: RankTrace, k: Nccl, lo: float, first: float | None) -> bool:
    """Whether ``k`` was launched before the window.

    Its launch call is before ``lo``, or, not in the trace, ``k`` started before the trace's ``first`` launch call (a
    kernel runs after its launch).
    """
    launched = trace.launches.get(k[NCCL_CORRELATION])
    return launched[0] < lo if launched is not None else first is not None and k[0] < first


def _external_id(trace: RankTrace, k: Nccl) -> Any:
    ext, corr = k[NCCL_EXTERNAL_ID], k[NCCL_CORRELATION]
    if ext not in (-1, None) or not isinstance(corr, int):
        return ext
    return trace.launches.get(corr, (0.0, -1))[1]


def _nccl_call(k: Nccl, args: dict[str, Any] | None) -> Call:
    if args is None:
        return nccl_collective(k[NCCL_NAME]) or "other", None, None, k[0], k[1], None
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
    for ts, end, span, dims, types, _tid in trace.extra.host_comms:
        if not keep(ts):
            continue
        name = collective_name(span.split(":", 1)[-1])
        nbytes = _span_bytes(name, dims, types, GLOO_SIZED) if span.startswith("gloo:") else None
        if nbytes is None:
            notes.add(NO_SIZE if span.startswith("gloo:") else HOST_ONLY)
        calls.append((name, group, n, ts, end, nbytes))
    return calls, sorted(notes)


def _span_bytes(name: str, dims: Any, types: Any, sized: tuple[str, ...]) -> int | None:
    """Bytes of a host span's single input tensor, for the collectives in ``sized``."""
    if name not in sized or not isinstance(dims, list) or not isinstance(types, list):
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

"""Operators against the roofline: per (operator, shapes, dtype) group, how close each came to the device's bound.

For each group of calls of a GEMM, attention, convolution, element-wise or reduction op with the same input shapes
and dtype (``record_shapes=True``; FLOPs and bytes from :mod:`~perf_callbacks.analysis.compute.op_cost`): the calls,
their device time (the kernels each call launched, attributed as the top ops are: :func:`ops.launching_op`; on a trace
without a device, each call's own CPU time), the FLOPs and bytes, the achieved TFLOP/s and TB/s, the arithmetic
intensity (FLOP per byte), and the roofline bound at that intensity::

    bound = min(peak FLOP/s for the dtype, intensity x peak bandwidth)

with the share of it reached and whether the group is compute- or memory-bound (its intensity above or below the
ridge point, peak FLOP/s / peak bandwidth). The peaks are :mod:`~perf_callbacks.analysis.compute.device_peaks`'; fp32
calls whose kernels use TF32 tensor cores (``tf32`` in a kernel's name) are held to the TF32 peak. Without a bandwidth
the bound is the compute peak alone (``bound`` is None); without a FLOP peak for the dtype, there is no bound. Rows
timed on the CPU (a trace without device activity) have no bound, whatever device the trace's metadata names.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict
from statistics import median
from typing import Any

from perf_callbacks.analysis.compute import precision
from perf_callbacks.analysis.compute.device_peaks import Peaks, device_peaks
from perf_callbacks.analysis.compute.mfu import META_KEY, flops_meta
from perf_callbacks.analysis.compute.op_cost import dtype_of, op_cost
from perf_callbacks.analysis.measures.ops import Threads, launching_op
from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.op_names import KNOWN, family
from perf_callbacks.analysis.trace.timeline import Timeline
from perf_callbacks.analysis.trace.window import InWindow

MAX_ROWS = 40
"""Groups kept per rank (the most device time first): the table shows ``--top`` of them."""
_SUMS = ("count", "device_time_ms", "flops", "bytes")
CPU_NO_PEAKS = "no bound: these are CPU times, never held to a device's peaks (the trace has no device activity)"


def rank_roofline(trace: RankTrace, tl: Timeline) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One rank's roofline rows (most device time first) and the peaks they are held to (``Peaks`` as a dict)."""
    peaks = device_peaks(trace.meta, flops_meta(trace.meta))
    inside = InWindow.of(tl)
    groups = _device_groups(trace, inside) if trace.has_gpu else _cpu_groups(trace, inside)
    if not trace.extra.shapes:
        _counted_flops(groups, trace, tl)
    rows = sorted(groups.values(), key=lambda g: -g["device_time_ms"])[:MAX_ROWS]
    return [finish(r, peaks) for r in rows], asdict(peaks)


def finish(row: dict[str, Any], peaks: Peaks) -> dict[str, Any]:
    """The row's achieved rates, intensity, bound, share of the bound and class, from its sums and the peaks."""
    seconds = row["device_time_ms"] / 1e3
    flops, nbytes = row["flops"], row["bytes"]
    row["peak_dtype"] = _peak_dtype(row)
    device = row.get("device") != "cpu"  # CPU time is never held to the peaks of the device the trace names
    row["peak_tflops"] = peak = peaks.tflops.get(row["peak_dtype"]) if device else None
    row["peak_tbps"] = bandwidth = peaks.tbps if device else None
    row["achieved_tflops"] = flops / seconds / 1e12 if flops is not None and seconds > 0 else None
    row["achieved_tbps"] = nbytes / seconds / 1e12 if nbytes is not None and seconds > 0 else None
    row["intensity"] = intensity = flops / nbytes if flops is not None and nbytes else None
    bound, kind = peak, None
    if peak is not None and bandwidth is not None and intensity is not None:
        bound = min(peak, intensity * bandwidth)
        kind = "compute" if intensity * bandwidth >= peak else "memory"
    row["bound_tflops"], row["bound"] = bound, kind
    row["bound_share"] = row["achieved_tflops"] / bound if bound and row["achieved_tflops"] is not None else None
    return row


def combine(
    per_rank: list[list[dict[str, Any]]], peaks: list[dict[str, Any]], peak_tbps: float | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The window's rows: each group summed over ranks and held to the first rank's peaks (``peak_tbps`` wins)."""
    if not per_rank or not any(per_rank):
        return [], peaks[0] if peaks else {}
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for rows in per_rank:
        for r in rows:
            key = (r["op"], r["shapes"], r["dtype"])
            if key not in merged:
                merged[key] = {**r, "kernels": list(r["kernels"])}
                continue
            m = merged[key]
            for k in _SUMS:
                m[k] = None if m[k] is None or r[k] is None else m[k] + r[k]
    peak = Peaks(**peaks[0]) if peaks else Peaks()
    if peak_tbps is not None:
        peak.tbps, peak.tbps_source = peak_tbps, f"--peak-tbps {peak_tbps:g}"
    total = sum(r["device_time_ms"] for r in merged.values()) or 1.0
    rows = sorted(merged.values(), key=lambda g: -g["device_time_ms"])
    for r in rows:
        r["time_fraction"] = r["device_time_ms"] / total
    return [finish(r, peak) for r in rows], asdict(peak)


def window_roofline(ranks: list[Any], peak_tbps: float | None = None) -> dict[str, Any]:
    """The ``AnalysisResult.measures`` fields ``roofline``, ``roofline_peaks`` and ``precision`` from its ranks'."""
    times = [s.time_ms for r in ranks for s in r.steps]
    step_ms = median(times) if times else None
    parts = [r.measures for r in ranks]
    rows, peaks = combine([m.roofline for m in parts], [m.roofline_peaks for m in parts if m.roofline_peaks], peak_tbps)
    hint = precision.combine([(r.rank, r.measures.precision, r.measures.roofline, r.span_ms) for r in ranks], peaks,
                             step_ms)
    return {"roofline": rows, "roofline_peaks": peaks, "precision": hint}


def roofline_lines(rows: list[dict[str, Any]], peaks: dict[str, Any], top_k: int) -> list[str]:
    """The report's table: ``top_k`` groups, most device time first; nothing without rows."""
    if not rows:
        return []
    where = "device" if rows[0].get("device") != "cpu" else "CPU"
    lines = [
        "",
        f"operators against the roofline (top {min(top_k, len(rows))} by {where} time):",
        f"  {'ms':>8} {'calls':>6} {'TFLOP/s':>8} {'TB/s':>6} {'FLOP/B':>7} {'% of bound':>10} {'bound':>7}  "
        "op [shapes] dtype",
    ]
    for r in rows[:top_k]:
        shapes = f" [{r['shapes']}]" if r["shapes"] else " [shapes not recorded]"
        lines.append(
            f"  {r['device_time_ms']:8.2f} {r['count']:6d} {_num(r['achieved_tflops'], 8)} "
            f"{_num(r['achieved_tbps'], 6)} {_num(r['intensity'], 7)} {_pct(r['bound_share'])} "
            f"{r['bound'] or 'n/a':>7}  {r['op']}{shapes} {r['dtype']}"
        )
    if (note := over_bound_note(rows[:top_k])) is not None:
        lines.append(f"  {note}")
    if where == "CPU":
        return [*lines, f"  {CPU_NO_PEAKS}"]
    tflops = ", ".join(f"{k} {v:g}" for k, v in peaks.get("tflops", {}).items())
    flops = f"{tflops} TFLOP/s ({peaks.get('tflops_source') or 'n/a'})" if tflops else "no peak FLOP/s known"
    tbps = f"{peaks['tbps']:g} TB/s ({peaks.get('tbps_source')})" if peaks.get("tbps") else str(
        peaks.get("tbps_source") or "no peak memory bandwidth known")
    return [*lines, f"  peaks: {flops}; {tbps}"]


def over_bound_note(rows: list[dict[str, Any]]) -> str | None:
    """What a share above 100% of the bound means, for the rows that have one; None when none has.

    Above the bandwidth bound, the op moved fewer bytes through device memory than the model counts (each input read
    and each output written once in device memory): part of its operands stayed in a cache. Above the compute bound,
    the peak FLOP/s taken for its dtype is below what the device did (the peak to check).

    Example:
        >>> over_bound_note([{"op": "aten::pow", "bound": "memory", "bound_share": 1.07}])
        'aten::pow above 100% of the bandwidth bound: part of its bytes stayed in a cache (e.g. L2) instead of device memory, which the bound assumes.'
    """  # noqa: E501
    over = [r for r in rows if (r.get("bound_share") or 0.0) > 1.0]
    memory = list(dict.fromkeys(r["op"] for r in over if r["bound"] == "memory"))
    compute = list(dict.fromkeys(r["op"] for r in over if r["bound"] != "memory"))
    said = []
    if memory:
        said.append(f"{', '.join(memory)} above 100% of the bandwidth bound: part of {_its(memory)} bytes stayed in a "
                    "cache (e.g. L2) instead of device memory, which the bound assumes")
    if compute:
        said.append(f"{', '.join(compute)} above 100% of the compute bound: faster than the peak FLOP/s taken for "
                    f"{_its(compute)} dtype (check the peak)")
    return "; ".join(said) + "." if said else None


def _its(ops: list[str]) -> str:
    return "its" if len(ops) == 1 else "their"


def _device_groups(trace: RankTrace, inside: InWindow) -> dict[tuple[str, str, str], dict[str, Any]]:
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    seen: dict[tuple[str, str, str], set[Any]] = defaultdict(set)
    threads: Threads = {}
    shapes = trace.extra.shapes
    for ts, end, kind, name, _dev, corr, ext in trace.gpu:
        if kind != "kernel" or not inside(ts):
            continue
        op = launching_op(trace, corr, ext, threads)
        if op is None or op not in KNOWN:
            continue
        if ext == -1 and corr in trace.launches:
            ext = trace.launches[corr][1]
        recorded = shapes.get(ext) if trace.ext_names.get(ext) == op else None
        key, cost = _key(op, recorded)
        group = groups.get(key) or groups.setdefault(key, _group(key, cost, "cuda"))
        group["device_time_ms"] += (end - ts) / 1e3
        group["kernel_ms"][name] += (end - ts) / 1e3
        if ext not in seen[key]:
            seen[key].add(ext)
            _add_call(group, cost)
    return _finish_groups(groups)


def _cpu_groups(trace: RankTrace, inside: InWindow) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Each known op's calls, timed by their own CPU span, each piece of work once.

    A call that holds a call of its own family is a wrapper (``aten::linear`` around ``aten::addmm``,
    ``aten::conv2d`` around ``aten::mkldnn_convolution``) and is left out; a call inside a counted one
    (``aten::copy_`` inside ``aten::addmm``) is part of that one's work and is left out too.
    """
    calls = sorted(
        ((*trace.ext_spans[ext], ext) for ext in trace.extra.shapes if ext in trace.ext_spans),
        key=lambda c: (str(c[2]), c[0], -c[1]),
    )
    names = [trace.ext_names[c[3]] for c in calls]
    parent: list[int | None] = []
    stack: list[int] = []
    for i, (ts, _end, tid, _ext) in enumerate(calls):
        while stack and (calls[stack[-1]][2] != tid or calls[stack[-1]][1] <= ts):
            stack.pop()
        parent.append(stack[-1] if stack else None)
        stack.append(i)
    wrappers = {p for i, p in enumerate(parent) if p is not None and family(names[p]) == family(names[i])}
    taken = [False] * len(calls)  # counted, or inside a counted call
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for i, (ts, end, _tid, ext) in enumerate(calls):
        up = parent[i]
        if up is not None and taken[up]:
            taken[i] = True
            continue
        if i in wrappers or not inside(ts):
            continue
        taken[i] = True
        key, cost = _key(names[i], trace.extra.shapes[ext])
        group = groups.get(key) or groups.setdefault(key, _group(key, cost, "cpu"))
        group["device_time_ms"] += (end - ts) / 1e3
        _add_call(group, cost)
    return _finish_groups(groups)


def _counted_flops(groups: dict[tuple[str, str, str], dict[str, Any]], trace: RankTrace, tl: Timeline) -> None:
    """Without recorded shapes: each op's FLOPs from the run's FlopCounterMode count, times the window's steps.

    The count of one step is ``flops_by_op`` in ``perf_callbacks_flops``; the bytes stay unknown.
    """
    raw = trace.meta.get(META_KEY)
    if not isinstance(raw, dict):
        return
    by_op = raw.get("flops_by_op")
    steps = sum(1 for _n, ts, _end, _tid in trace.steps if tl.lo <= ts < tl.hi)
    if not isinstance(by_op, dict) or not steps:
        return
    dtype = str(raw.get("dtype") or "").split(" ")[0]
    for (op, _shapes, _dtype), group in groups.items():
        count = by_op.get(op)
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            group["flops"], group["dtype"] = count * steps, dtype
            group["flops_source"] = f"FlopCounterMode: {count:.3g} per step x {steps} steps"


def _key(op: str, recorded: tuple[Any, Any, Any] | None) -> tuple[tuple[str, str, str], Any]:
    if recorded is None:
        return (op, "", ""), None
    dims, types, concrete = recorded
    shown = ", ".join(str(d) for d in dims if isinstance(d, list) and d) if isinstance(dims, list) else ""
    return (op, shown, dtype_of(types)), op_cost(op, dims, types, concrete)


def _group(key: tuple[str, str, str], cost: Any, device: str) -> dict[str, Any]:
    return {
        "op": key[0],
        "shapes": key[1],
        "dtype": key[2],
        "kind": cost[0] if cost else "",
        "device": device,
        "count": 0,
        "device_time_ms": 0.0,
        "flops": 0 if cost else None,
        "bytes": 0 if cost else None,
        "flops_source": "recorded shapes" if cost else "",
        "kernel_ms": Counter(),
    }


def _add_call(group: dict[str, Any], cost: Any) -> None:
    group["count"] += 1
    if cost is not None and group["flops"] is not None:
        group["flops"] += cost[1]
        group["bytes"] += cost[2]


def _finish_groups(groups: dict[tuple[str, str, str], dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    total = sum(g["device_time_ms"] for g in groups.values()) or 1.0
    for g in groups.values():
        kernels = g.pop("kernel_ms")
        g["kernels"] = [{"name": n, "time_ms": ms} for n, ms in kernels.most_common(3)]
        g["time_fraction"] = g["device_time_ms"] / total
    return groups


def _peak_dtype(row: dict[str, Any]) -> str:
    if row["dtype"] == "fp32" and any("tf32" in k["name"].lower() for k in row["kernels"]):
        return "tf32"
    return str(row["dtype"])


def _num(value: float | None, width: int) -> str:
    if value is None:
        return f"{'n/a':>{width}}"
    return f"{value:>{width}.3g}"


def _pct(value: float | None) -> str:
    return f"{'n/a':>10}" if value is None else f"{value:>10.0%}"

"""The report's lines for memory by operator, collectives, transfers and launch latency, and the ``--sort`` op table."""

from __future__ import annotations

from typing import Any

from perf_callbacks.analysis.measures.copies import is_small
from perf_callbacks.analysis.measures.op_table import sorted_ops
from perf_callbacks.analysis.memory.growth import growth_lines
from perf_callbacks.analysis.results.result import AnalysisResult


def measure_lines(result: AnalysisResult) -> list[str]:
    """Memory, communication, transfers and launch latency, each only when the trace holds it."""
    lines = _memory(result) + growth_lines(result.memory.growth) + _communication(result) + _copies(result)
    lines += _launch(result)
    return [""] + lines if lines else []


def op_lines(result: AnalysisResult, top_k: int, sort: str) -> list[str]:
    """The op table sorted by ``sort`` (``self_cpu``, ``calls``, ``memory`` or ``device_time``), ``top_k`` rows."""
    rows = sorted_ops(result.measures.op_table, sort)[:top_k]
    if not rows:
        return []
    if sort == "memory" and result.memory.peak is None:
        return ["top ops by self memory: the trace has no [memory] events (profile with profile_memory=True)"]
    label = {"device_time": "self device time", "self_cpu": "self CPU time", "calls": "calls",
             "memory": "self memory"}[sort]
    lines = [f"top ops by {label}:", f"  {'device ms':>10} {'self CPU ms':>12} {'calls':>8} {'self memory':>12}  op"]
    for r in rows:
        device = "n/a" if r["device_time_us"] is None else f"{r['device_time_us'] / 1e3:.2f}"
        name = r["name"] if len(r["name"]) <= 60 else r["name"][:57] + "..."
        lines.append(f"  {device:>10} {r['self_cpu_us'] / 1e3:12.2f} {r['calls']:8d} "
                     f"{size(r['self_memory_bytes']):>12}  {name}")
    return lines


def size(nbytes: float | None) -> str:
    """Bytes in decimal units: ``25.2 MB``, ``-1.5 kB``, ``512 B``.

    Example:
        >>> size(25_165_824), size(-1536), size(512), size(None)
        ('25.2 MB', '-1.5 kB', '512 B', 'n/a')
    """
    if nbytes is None:
        return "n/a"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def rate(gbps: float | None) -> str:
    """GB/s with sense for small rates (``142 GB/s``, ``6.6 GB/s``, ``0.011 GB/s``)."""
    if gbps is None:
        return "n/a"
    return f"{gbps:.0f} GB/s" if gbps >= 100 else f"{gbps:.1f} GB/s" if gbps >= 1 else f"{gbps:.3f} GB/s"


def comm_line(c: dict[str, Any]) -> str:
    """``AllReduce x48, 25.2 MB each (mean): 9.8 ms, 6.1 ms exposed, busbw 142 GB/s (140 GB/s p50 of calls)``."""
    each = f", {size(c['bytes'] / c['count'])} each (mean)" if c["bytes"] is not None and c["count"] else ""
    head = f"{c['name']} x{c['count']}{each}: {c['total_ms']:.1f} ms, {c['exposed_ms']:.1f} ms exposed"
    group = f"group {c['group'] or '?'} of {c['group_size'] if c['group_size'] is not None else '? ranks'}"
    if c["group_size"] == 1:
        return f"{head}; {group}: no data moved (busbw 0)"
    if c["bytes"] is None:
        return f"{head}; no message size in the trace ({group})"
    if c["busbw_gbps"] is None:
        return f"{head}, algbw {rate(c['algbw_gbps'])} ({group}; busbw needs the group size)"
    p50 = f" ({rate(c['busbw_p50_gbps'])} p50 of calls)" if c.get("busbw_p50_gbps") is not None else ""
    return f"{head}, busbw {rate(c['busbw_gbps'])}{p50}, algbw {rate(c['algbw_gbps'])} ({group})"


def _communication(result: AnalysisResult) -> list[str]:
    if not result.measures.communication:
        return []
    overlap = result.measures.overlap_fraction
    over = "" if overlap is None else f"; {overlap:.0%} of their time overlapped compute"
    ranks = f", summed over {len(result.ranks)} ranks" if len(result.ranks) > 1 else ""
    return [f"collectives (total bytes / total time{ranks}{over}):"] + \
        [f"  {comm_line(c)}" for c in result.measures.communication]


def _copies(result: AnalysisResult) -> list[str]:
    if not result.measures.copies:
        return []
    ranks = f", summed over {len(result.ranks)} ranks" if len(result.ranks) > 1 else ""
    lines = [f"transfers (memcpy{ranks}):"]
    for c in result.measures.copies:
        what = f"{c['kind']} {c['memory']}" if c["memory"] != "device" else c["kind"]
        lines.append(f"  {what} x{c['count']}, {size(c['bytes'])}: {c['total_ms']:.2f} ms, {copy_speed(c)}")
    return lines


def copy_speed(c: dict[str, Any]) -> str:
    """A copy row's rate, or for small copies the time per copy (their latency; a rate would mislead).

    Example:
        >>> copy_speed({"count": 24, "bytes": 96, "total_ms": 0.04, "gbps": 0.0024})
        '1.7 us per copy (4 B each: latency, too small for a rate)'
    """
    if c["gbps"] is None:
        return "no byte count in the trace"
    if is_small(c):
        return f"{duration(c['total_ms'] * 1e3 / c['count'])} per copy ({size(c['bytes'] / c['count'])} each: " \
               "latency, too small for a rate)"
    return rate(c["gbps"])


def _launch(result: AnalysisResult) -> list[str]:
    x = result.measures.launch
    if not x:
        return []
    small = f"{x['small_kernels']} kernels under 10 us ({x['small_kernel_fraction']:.0%} of kernel time)"
    if x["p50_us"] is None:
        return [f"launch: {small}; launch latency unknown (no launch call traced)"]
    call = "" if x["launch_call_p50_us"] is None else f"; launch call p50 {duration(x['launch_call_p50_us'])}"
    return [f"launch: launch-call end to kernel start p50 {duration(x['p50_us'])}, p95 {duration(x['p95_us'])} "
            f"(as HTA defines it; 0 when a kernel started before its call returned){queue_note(x)}{call}; {small}"]


def queue_note(x: dict[str, Any]) -> str:
    """What the launch delay means: queue depth on a busy device, or launch cost on a free one.

    Example:
        >>> queue_note({"queued_fraction": 1.0, "idle_p50_us": None})
        ': queue depth, not launch cost (100% of kernels waited behind earlier work on a busy device)'
        >>> queue_note({"queued_fraction": 0.2, "idle_p50_us": 4.5})
        '; 20% of kernels queued behind earlier work (kernels that found the device free: p50 4.5 us)'
    """
    queued, free = x.get("queued_fraction"), x.get("idle_p50_us")
    if not queued:
        return ""
    cost = f"; kernels that found the device free: p50 {duration(free)}" if free is not None else ""
    if queued >= 0.5:
        return f": queue depth, not launch cost ({queued:.0%} of kernels waited behind earlier work on a busy " \
               f"device{cost})"
    return f"; {queued:.0%} of kernels queued behind earlier work ({cost[2:]})" if cost else \
        f"; {queued:.0%} of kernels queued behind earlier work"


def category_lines(cats: dict[str, int] | None, at: dict[str, Any] | None) -> list[str]:
    """``  the peak by category: parameters 1.2 MB, ...`` and, on a device, what the parts leave unexplained.

    Example:
        >>> cats = {"parameters": 600, "gradients": 0, "optimizer_state": 400, "activations": 400, "other": 100,
        ...         "peak": 1500}
        >>> category_lines(cats, {"phase": "backward", "op": "aten::add"})
        ['  the peak by category (1.5 kB, in backward, at aten::add): parameters 600 B, gradients 0 B, optimizer \
state 400 B, activations 400 B, other 100 B']
    """
    if not cats or not at:
        return []
    parts = ", ".join(f"{k.replace('_', ' ')} {size(cats[k])}" for k in _CATEGORIES)
    kept = f" with the {size(at['resident'])} that lived through the window" if at.get("memory") == "host" else ""
    lines = [f"  the peak by category ({size(cats['peak'])}{kept}, in {at['phase']}, at {at['op']}): {parts}"]
    if (at.get("not_resident") or 0) > 0:
        lines.append(f"    of which {size(at['not_resident'])} was allocated before the window and is none of "
                     "parameters, gradients and optimizer state (the batch, tensors kept from an earlier step)")
    return lines


_CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "other")


def duration(us: float) -> str:
    """Microseconds as ``12.8 us``, from 1 ms on as ``262.6 ms``.

    Example:
        >>> duration(12.79), duration(262553.9)
        ('12.8 us', '262.6 ms')
    """
    return f"{us:.1f} us" if us < 1000 else f"{us / 1e3:.1f} ms"


def _memory(result: AnalysisResult) -> list[str]:
    peak = result.memory.peak
    if peak is None:
        return []
    kind = "host" if peak.get("memory") == "host" else "device"
    lines = [f"{kind} memory: peak {size(peak['bytes'])} allocated in {peak['op']}, {peak['ts_ms']:.1f} ms into the "
             "window"]
    lines += category_lines(result.memory.categories, result.memory.at_peak)
    if peak.get("held_by_op"):
        held = ", ".join(f"{m['name']} {size(m['bytes'])}" for m in peak["held_by_op"][:3])
        lines.append(f"  held at the peak, by the op that allocated it: {held}")
    if result.memory.by_op:
        tops = ", ".join(f"{m['name']} {size(m['self_bytes'])} (x{m['calls']})" for m in result.memory.by_op[:3])
        lines.append(f"  most self memory (allocated less freed inside the op, over the window; memory another op "
                     f"frees still counts, so these are not what is held): {tops}")
    return lines


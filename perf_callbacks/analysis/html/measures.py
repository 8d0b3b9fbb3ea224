"""The HTML report's sections for collectives, transfers, launch latency, memory (by op and over time) and balance."""

from __future__ import annotations

from html import escape
from typing import Any

from perf_callbacks.analysis.measures.text import comm_line, copy_speed, duration, queue_note, size
from perf_callbacks.analysis.memory.growth import growth_lines
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult


def measure_sections(result: AnalysisResult) -> list[str]:
    """Each section whose figures the window has; the per-rank balance only with several ranks."""
    parts = []
    if result.measures.communication:
        overlap = result.measures.overlap_fraction
        over = "" if overlap is None else f" &middot; {overlap:.0%} of collective time overlapped compute"
        rows = "".join(f"<li>{escape(comm_line(c))}</li>" for c in result.measures.communication)
        parts.append(f"<h2>Collectives</h2><p>total bytes / total time{over}</p><ul>{rows}</ul>")
    if result.measures.copies:
        parts.append("<h2>Transfers</h2>" + _table(
            ("kind", "memory", "count", "bytes", "ms", "GB/s (per copy where too small for a rate)"),
            [(c["kind"], c["memory"], c["count"], size(c["bytes"]), f"{c['total_ms']:.2f}", copy_speed(c))
             for c in result.measures.copies]))
    launch = result.measures.launch
    if launch and launch["p50_us"] is not None:
        parts.append(f"<h2>Kernel launch</h2><p>launch-call end to kernel start p50 {duration(launch['p50_us'])}, p95 "
                     f"{duration(launch['p95_us'])}{escape(queue_note(launch))}; {launch['small_kernels']} kernels "
                     "under 10 us "
                     f"({launch['small_kernel_fraction']:.0%} of kernel time)</p>")
    parts += _memory(result)
    if len(result.ranks) > 1:
        parts.append("<h2>Balance across ranks</h2>" + _balance(result.ranks))
    return parts


def _memory(result: AnalysisResult) -> list[str]:
    peak = result.memory.peak
    if peak is None:
        return []
    kind = "Host" if peak.get("memory") == "host" else "Device"
    parts = [f"<h2>{kind} memory</h2><p>peak {size(peak['bytes'])} allocated in {escape(str(peak['op']))}, "
             f"{peak['ts_ms']:.1f} ms into the window</p>"]  # the curve: html_window's timeline chart
    if cats := result.memory.categories:
        parts.append(_table(("the peak by category", "bytes"),
                            [(k.replace("_", " "), size(v)) for k, v in cats.items()]))
    if peak.get("held_by_op"):
        parts.append(_table(("op that allocated it", "held at the peak"),
                            [(m["name"], size(m["bytes"])) for m in peak["held_by_op"]]))
    if result.memory.by_op:
        parts.append(_table(("op", "self memory (allocated less freed inside the op; not what is held)", "calls"),
                            [(m["name"], size(m["self_bytes"]), m["calls"]) for m in result.memory.by_op]))
    if result.memory.growth is not None:  # the run's memory grew: what this window kept across steps
        parts.append("".join(f"<p>{escape(line.strip())}</p>" for line in growth_lines(result.memory.growth)))
    return parts


def _balance(ranks: list[RankResult]) -> str:
    """Per rank: utilization, median step time, exposed collective time and data wait, side by side."""
    rows = []
    for r in ranks:
        exposed = sum(c["exposed_ms"] for c in r.measures.communication)
        util = "n/a" if r.gpu_utilization is None else f"{r.gpu_utilization:.1%}"
        step = "n/a" if r.step_time_ms is None else f"{r.step_time_ms:.1f}"
        rows.append((r.rank, util, step, f"{exposed:.1f}", f"{r.data_wait_fraction:.1%}", r.verdict))
    longest = max((float(x[3]) for x in rows), default=0.0) or 1.0
    body = "".join(
        f"<tr><td>{rk}</td><td>{u}</td><td>{s}</td><td>{e} <svg width=\"120\" height=\"10\"><rect width=\""
        f"{float(e) / longest * 120:.0f}\" height=\"10\" fill=\"#6a1b9a\"/></svg></td><td>{w}</td>"
        f"<td>{escape(v)}</td></tr>" for rk, u, s, e, w, v in rows)
    head = "<tr><th>rank</th><th>utilization</th><th>step ms (median)</th><th>exposed collectives ms</th>" \
           "<th>data wait</th><th>verdict</th></tr>"
    return f'<table class="balance">{head}{body}</table>'


def _table(head: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{th}</tr>{body}</table>"

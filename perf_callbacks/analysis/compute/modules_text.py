"""The report's modules lines and HTML table (the rows of ``analysis/compute/modules.py``), or how to get them."""

from __future__ import annotations

from html import escape
from typing import Any

from perf_callbacks.analysis.results.result import AnalysisResult

TURN_ON = ("modules: no module spans in this trace; set module_spans: true in the callback's or hook's options to see "
           "each module's share of device time, FLOPs and parameters (perf-callbacks report --modules DEPTH)")


def module_lines(result: AnalysisResult) -> list[str]:
    """The report's module lines (the rows of ``result.modules``), or the one line that says how to get them."""
    rows = result.modules
    if not rows:
        notes = [r.modules["note"] for r in result.ranks if r.modules and r.modules.get("note")]
        if notes:
            return ["", f"modules: no module spans recorded: {notes[0]}"]
        ours = any(r.machine for r in result.ranks)  # recorded by perf-callbacks: the option is there to turn on
        return ["", TURN_ON] if ours else []
    what = "device time" if result.device not in ("", "none") else "CPU op time"
    lines = ["", f"modules (time: {what} in the window; FLOPs: the counted step's, as MFU counts them):"]
    for row in rows:
        indent = "    " if row["group"] else "  "
        lines.append(f"{indent}{row['module']}: {row_text(row, what)}")
    flops_notes = {r.modules.get("flops_note") for r in result.ranks if r.modules and r.modules.get("flops") is None}
    lines += [f"  FLOPs by module: {n}" for n in sorted(n for n in flops_notes if n)]
    return lines


def row_text(row: dict[str, Any], what: str = "device time") -> str:
    """``71% of device time, 38% of MFU-counted FLOPs, 2 x 1.2 M params``.

    Example:
        >>> row_text({"time_fraction": 0.71, "flops_fraction": 0.38, "params": 2.4e6, "members": 2})
        '71% of device time, 38% of MFU-counted FLOPs, 2 x 1.2 M params'
    """
    parts = [f"{row['time_fraction']:.0%} of {what}"]
    if row.get("flops_fraction") is not None:
        parts.append(f"{row['flops_fraction']:.0%} of MFU-counted FLOPs")
    if row.get("params"):
        members = row.get("members") or 0
        each = f"{members} x {_count(row['params'] / members)}" if members > 1 else _count(row["params"])
        parts.append(f"{each} params")
    return ", ".join(parts)


def module_section(result: AnalysisResult) -> list[str]:
    """The HTML report's modules table (or the line that says how to get one)."""
    lines = module_lines(result)
    if not result.modules:
        return [f"<h2>Modules</h2><p>{escape(lines[-1])}</p>"] if lines else []
    what = lines[1]
    head = "".join(f"<th>{h}</th>" for h in ("module", "time share", "time ms", "FLOPs share", "params", "calls"))
    body = "".join(
        f"<tr><td>{'&nbsp;&nbsp;' if r['group'] else ''}{escape(r['module'])}</td><td>{r['time_fraction']:.1%}</td>"
        f"<td>{r['time_us'] / 1e3:.2f}</td>"
        f"<td>{'' if r['flops_fraction'] is None else format(r['flops_fraction'], '.1%')}</td>"
        f"<td>{'' if not r['params'] else _count(r['params'])}</td><td>{r['calls'] or ''}</td></tr>"
        for r in result.modules)
    return [f"<h2>Modules</h2><p>{escape(what)}</p><table><tr>{head}</tr>{body}</table>"]


def _count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f}"

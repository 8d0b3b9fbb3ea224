"""The HTML report's roofline table and precision hint (a plain table; nothing when there is nothing to show)."""

from __future__ import annotations

from html import escape
from typing import Any

from perf_callbacks.analysis.compute.roofline import over_bound_note

_COLUMNS = ("op", "shapes", "dtype", "calls", "device ms", "TFLOP/s", "TB/s", "FLOP/B", "% of bound", "bound")


def roofline_sections(rows: list[dict[str, Any]], hint: dict[str, Any] | None, top_k: int = 20) -> list[str]:
    """``<h2>Operators against the roofline</h2>`` with its table, and the precision hint when there is one.

    Example:
        >>> roofline_sections([], None)
        []
    """
    parts = []
    if hint:
        parts.append(f"<h2>Precision</h2><p>{escape(hint['text'])}</p><p>basis: {escape(hint['basis'])}</p>")
    if rows:
        head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
        body = "".join(_row(r) for r in rows[:top_k])
        note = over_bound_note(rows[:top_k])
        parts.append(f"<h2>Operators against the roofline</h2><table><tr>{head}</tr>{body}</table>"
                     + (f"<p><em>{escape(note)}</em></p>" if note else ""))
    return parts


def _row(r: dict[str, Any]) -> str:
    cells = (
        r["op"],
        r["shapes"] or "not recorded",
        r["dtype"],
        str(r["count"]),
        f"{r['device_time_ms']:.2f}",
        _num(r["achieved_tflops"]),
        _num(r["achieved_tbps"]),
        _num(r["intensity"]),
        "n/a" if r["bound_share"] is None else f"{r['bound_share']:.0%}",
        r["bound"] or "n/a",
    )
    return "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"

"""``diff``'s comparison of the peak by category, and which category changed.

Each category of ``memory_categories`` (parameters, gradients, optimizer state, activations, other, and the peak)
is compared; a category has changed when it moved by more than ``THRESHOLD`` of the base window's peak (memory does
not jitter the way time does: a change this large is what the run did, not noise). ``changed`` lists them, largest
move first.

Example:
    >>> base = {"parameters": 100, "gradients": 100, "optimizer_state": 200, "activations": 500, "other": 100,
    ...         "peak": 1000}
    >>> d = compare_categories(base, {**base, "activations": 250, "peak": 750})
    >>> d["changed"], d["activations"]
    (['activations', 'peak'], {'base': 500, 'new': 250, 'change': -250})
    >>> category_diff_lines(d)[4]
    '  activations                               500 B ->        250 B   -250 B (changed)'
"""

from __future__ import annotations

from typing import Any

from perf_callbacks.analysis.measures.text import size
from perf_callbacks.analysis.memory.parts import KEYS

THRESHOLD = 0.10
"""A category changed when it moved by more than this share of the base window's peak."""


def compare_categories(base: dict[str, int] | None, new: dict[str, int] | None) -> dict[str, Any]:
    """``{category: {base, new, change}, changed: [...]}``, or {} when neither side has categories."""
    if not base and not new:
        return {}
    out: dict[str, Any] = {}
    for k in KEYS:
        a, b = (base or {}).get(k), (new or {}).get(k)
        out[k] = {"base": a, "new": b, "change": None if a is None or b is None else b - a}
    bar = THRESHOLD * (base or {}).get("peak", 0)
    moved = [k for k in KEYS if out[k]["change"] is not None and abs(out[k]["change"]) > bar]
    out["changed"] = sorted(moved, key=lambda k: (-abs(out[k]["change"]), KEYS.index(k)))
    return out


def category_diff_lines(d: dict[str, Any]) -> list[str]:
    """The text lines: one per category, ``(changed)`` on those beyond the threshold."""
    if not d:
        return []
    lines = [f"memory peak by category (changed: moved by more than {THRESHOLD:.0%} of the base peak):"]
    for k in KEYS:
        v = d[k]
        change = "" if v["change"] is None else f"{'+' if v['change'] > 0 else ''}{size(v['change'])}"
        mark = " (changed)" if k in d["changed"] else ""
        lines.append(f"  {k.replace('_', ' '):34} {size(v['base']):>12} -> {size(v['new']):>12}   {change}{mark}")
    return lines


def changed_line(d: dict[str, Any]) -> str | None:
    """``memory: activations -250 B (500 B -> 250 B)`` for the categories that changed, None if none did."""
    if not d or not d.get("changed"):
        return None
    parts = [f"{k.replace('_', ' ')} {'+' if d[k]['change'] > 0 else ''}{size(d[k]['change'])} ({size(d[k]['base'])} "
             f"-> {size(d[k]['new'])})" for k in d["changed"] if k != "peak"]
    return "memory changed: " + ", ".join(parts) if parts else None

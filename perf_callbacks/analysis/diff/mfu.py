"""``diff`` on MFU: the two sides' MFU and each part of the MFU gap, with their change in points.

Example:
    >>> mfu, gap = mfu_delta({"mfu": 0.4, "mfu_gap": {"input": 0.2, "below_peak": 0.4}},
    ...                      {"mfu": 0.5, "mfu_gap": {"input": 0.1, "below_peak": 0.4}})
    >>> round(mfu["change"], 2), round(gap["input"]["change"], 2)
    (0.1, -0.1)
    >>> gap_lines(gap)[1]
    '  input                        20.0 ->       10.0   -10.0'
"""

from __future__ import annotations

from typing import Any

from perf_callbacks.analysis.compute.mfu import IDLE

GAP_KEYS = (*IDLE, "below_peak")
_LABELS = {"other": "unexplained idle", "below_peak": "busy, below peak"}


def mfu_delta(base: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``{base, new, change}`` of the MFU, and of each part of the gap (fractions; {} when neither side has one)."""
    mfu = _delta(base.get("mfu"), new.get("mfu"))
    a, b = base.get("mfu_gap") or {}, new.get("mfu_gap") or {}
    gap = {k: _delta(a.get(k) if a else None, b.get(k) if b else None) for k in GAP_KEYS} if a or b else {}
    return mfu, gap


def gap_lines(gap: dict[str, dict[str, Any]]) -> list[str]:
    """The gap's parts in points, largest change first (parts at 0 on both sides left out)."""
    if not gap:
        return []
    out = ["MFU gap by cause, points of peak (largest change first):"]
    rows = [(k, v) for k, v in gap.items() if v["base"] or v["new"]]
    rows.sort(key=lambda kv: -abs(kv[1]["change"] or 0.0))
    for key, v in rows:
        change = "n/a" if v["change"] is None else f"{v['change'] * 100:+.1f}"
        out.append(f"  {_LABELS.get(key, key):22} {_pts(v['base']):>10} -> {_pts(v['new']):>10}   {change}")
    return out


def _pts(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}"


def _delta(a: float | None, b: float | None) -> dict[str, Any]:
    return {"base": a, "new": b, "change": None if a is None or b is None else b - a}

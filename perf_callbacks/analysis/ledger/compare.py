"""Two runs' ledgers part by part (``perf-callbacks diff``): each part's seconds on both sides and the change.

The slowest rank of each side is compared (the one whose wall time the run took). Parts under 0.5% of both walls are
left out of the text, never of the JSON.

Example:
    >>> from perf_callbacks.analysis.ledger.parts import PARTS, Ledger
    >>> def led(ckpt):
    ...     return Ledger(0, 10.0 + ckpt, dict.fromkeys(PARTS, 0.0) | {"productive": 10.0, "checkpoint": ckpt},
    ...                   "process", 100, 0.1)
    >>> d = compare_ledgers([led(5.0)], [led(0.5)])
    >>> d["change"]["checkpoint"], d["change"]["wall_s"]
    (-4.5, -4.5)
    >>> print(format_ledger_diff(d).splitlines()[5])
      checkpoints                5.00 s     0.50 s     -4.50 s
"""

from __future__ import annotations

from typing import Any

from perf_callbacks.analysis.diff.steps import StepRecord
from perf_callbacks.analysis.ledger.parts import PARTS, Ledger, rank_ledger
from perf_callbacks.analysis.ledger.text import LABELS

__all__ = ["compare_ledgers", "format_ledger_diff", "record_ledgers"]
SHOWN = 0.005


def record_ledgers(records: list[StepRecord]) -> list[Ledger]:
    """The ledgers of the ranks in ``records`` whose run closed."""
    return [led for r in records if (led := rank_ledger(r)) is not None]


def compare_ledgers(base: list[Ledger], new: list[Ledger]) -> dict[str, Any] | None:
    """The slowest rank's ledger of each side and their change; None when a side has no ledger.

    ``{"base": {...}, "new": {...}, "change": {part: new - base, "wall_s": ..., "goodput": ...}}``.
    """
    if not base or not new:
        return None
    a, b = (max(side, key=lambda led: led.wall_s) for side in (base, new))
    change = {k: round(b.parts[k] - a.parts[k], 4) for k in PARTS}
    change |= {"wall_s": round(b.wall_s - a.wall_s, 4), "goodput": round(b.goodput - a.goodput, 4)}
    return {"base": a.to_dict(), "new": b.to_dict(), "change": change}


def format_ledger_diff(d: dict[str, Any], shown: float = SHOWN) -> str:
    """A table: the wall time, goodput and each part over ``shown`` of either wall, base / new / change."""
    a, b = d["base"], d["new"]
    lines = [f"ledger (the slowest rank: base rank {a['rank']}, new rank {b['rank']}):",
             f"  {'':<22}{'base':>9}  {'new':>9}  {'change':>10}",
             f"  {'wall time':<22}{a['wall_s']:>9.2f} s{b['wall_s']:>9.2f} s{d['change']['wall_s']:>+10.2f} s",
             f"  {'goodput':<22}{a['goodput']:>10.0%}{b['goodput']:>11.0%}{d['change']['goodput'] * 100:>+11.0f} pt"]
    for k in PARTS:
        va, vb = a["parts"][k], b["parts"][k]
        if abs(va) >= shown * a["wall_s"] or abs(vb) >= shown * b["wall_s"]:
            lines.append(f"  {LABELS[k]:<22}{va:>9.2f} s{vb:>9.2f} s{d['change'][k]:>+10.2f} s")
    return "\n".join(lines) + "\n"

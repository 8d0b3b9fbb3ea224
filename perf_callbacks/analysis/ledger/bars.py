"""The ledger on the HTML run page: one stacked bar per rank (each part's share of the wall time) and the advice.

``perf-callbacks report --html`` puts :func:`ledger_section` before the page's end (``cli/report.py``): plain HTML and
inline styles, no script, so that it stands in any page.

Example:
    >>> from perf_callbacks.analysis.ledger.parts import PARTS, Ledger
    >>> parts = dict.fromkeys(PARTS, 0.0) | {"productive": 6.0, "checkpoint": 4.0}
    >>> html = ledger_section([Ledger(0, 10.0, parts, "process", 10, 1.0)])
    >>> 'title="checkpoints 4.00 s (40%)"' in html and "width:60.00%" in html
    True
"""

from __future__ import annotations

from html import escape

from perf_callbacks.analysis.ledger.advice import ledger_advice
from perf_callbacks.analysis.ledger.parts import PARTS, Ledger
from perf_callbacks.analysis.ledger.text import LABELS, summary_line

__all__ = ["ledger_section"]
COLORS = dict(zip(PARTS, ("#bbb", "#999", "#2e7d32", "#8bc34a", "#6a1b9a", "#e65100", "#b71c1c", "#1565c0",
                          "#64b5f6", "#f9a825", "#ff7043", "#fdd835", "#795548", "#607d8b", "#eee"), strict=True))


def ledger_section(ledgers: list[Ledger]) -> str:
    """A ``<section>``: the ledger's line, a bar per rank, its legend and the slowest rank's advice ("" for none)."""
    if not ledgers:
        return ""
    slowest = max(ledgers, key=lambda led: led.wall_s)
    rows = "".join(f'<div style="display:flex;align-items:center;margin:2px 0"><span style="width:5em">rank '
                   f'{led.rank}</span>{_bar(led)}</div>' for led in ledgers)
    legend = " ".join(f'<span style="white-space:nowrap"><span style="display:inline-block;width:.9em;height:.9em;'
                      f'background:{COLORS[k]}"></span> {escape(LABELS[k])}</span>' for k in PARTS
                      if any(abs(led.parts[k]) > 0 for led in ledgers))
    advice = "".join(f"<li>{escape(a.text)}</li>" for a in ledger_advice(slowest))
    return (f'<section class="ledger" id="ledger"><h2>Ledger: every second of the run</h2>'
            f"<p>{escape(summary_line(slowest))}</p>{rows}<p>{legend}</p>"
            + (f"<ul>{advice}</ul>" if advice else "") + "</section>")


def _bar(led: Ledger) -> str:
    """One rank's stacked bar: a block per part over 0 s, as wide as its share of the wall time."""
    blocks = "".join(f'<span title="{escape(LABELS[k])} {v:.2f} s ({v / led.wall_s:.0%})" style="display:inline-block;'
                     f'height:1.2em;width:{100 * v / led.wall_s:.2f}%;background:{COLORS[k]}"></span>'
                     for k, v in led.parts.items() if v > 0 and led.wall_s > 0)
    return f'<span style="flex:1;display:flex">{blocks}</span><span style="width:6em;text-align:right">' \
           f"{led.wall_s:.1f} s</span>"

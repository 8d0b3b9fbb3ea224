"""``render_run_diff_html``: the run-wide comparison (``diff --html`` without ``--windows``) as one self-contained page.

The same sentences as the text (``analysis/diff/run_text.py``): the machine first, the call in the primary unit, the
figures behind it, the secondary units, then a bar of each side's cost with the interval of the effect.

Example:
    >>> from perf_callbacks.analysis.diff.run_wide import compare_runs
    >>> from perf_callbacks.analysis.diff.steps import StepRecord
    >>> def run(ms):
    ...     return [StepRecord(0, list(range(50)), [ms / 1e3] * 50, [8.0] * 50, [0.0] * 50, [0.0] * 50, [0.0] * 50)]
    >>> "improvement" in render_run_diff_html(compare_runs(run(10), run(5)))
    True
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from perf_callbacks.analysis.diff.run_text import format_run_diff

_CSS = """body{font:14px sans-serif;margin:24px;color:#222}h1{font-size:20px}
.summary{font-size:17px;font-weight:bold}.regression{color:#c62828}.improvement{color:#2e7d32}.undecided{color:#555}
.machine{color:#8a4b00;font-weight:bold}pre{background:#f6f6f6;padding:8px}svg text{font:11px sans-serif}"""
_W, _H = 520, 70


def render_run_diff_html(d: dict[str, Any]) -> str:
    """Render what :func:`~perf_callbacks.analysis.diff.run_wide.compare_runs` returned as one HTML page."""
    lines = format_run_diff(d).splitlines()
    body = [f"<h1>{escape(lines[0])}</h1>"]
    body += [f"<p>{escape(x.strip())}</p>" for x in lines[1:3]]
    rest = lines[3:]
    if d["machine"]:
        body.append(f'<p class="machine">{escape(rest.pop(0))}</p>')
    css = d["call"].replace(" ", "-")
    body.append(f'<p class="summary {css}">{escape(rest.pop(0))}</p>')
    body.append(_interval_svg(d))
    body.append("<pre>" + escape("\n".join(x.strip() for x in rest)) + "</pre>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>perf-callbacks diff</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")


def _interval_svg(d: dict[str, Any]) -> str:
    """The effect and its interval on an axis from -100% to +100%, with the +-threshold band."""
    def x(v: float) -> float:
        return 10 + (max(-1.0, min(1.0, v)) + 1) / 2 * (_W - 20)

    t = d["threshold"]
    lo = d["ci_low"] if math.isfinite(d["ci_low"]) else -1.0
    hi = d["ci_high"] if math.isfinite(d["ci_high"]) else 1.0
    return (f'<svg width="{_W}" height="{_H}" role="img" aria-label="effect and its interval">'
            f'<rect x="{x(-t):.1f}" y="10" width="{x(t) - x(-t):.1f}" height="30" fill="#eee"/>'
            f'<line x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="25" y2="25" stroke="#1565c0" stroke-width="4"/>'
            f'<circle cx="{x(d["effect"]):.1f}" cy="25" r="5" fill="#1565c0"/>'
            f'<line x1="{x(0):.1f}" x2="{x(0):.1f}" y1="5" y2="45" stroke="#999"/>'
            f'<text x="10" y="62">-100%</text><text x="{x(0) - 6:.1f}" y="62">0</text>'
            f'<text x="{_W - 45}" y="62">+100%</text></svg>')

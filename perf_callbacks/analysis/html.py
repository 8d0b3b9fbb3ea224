"""``render_html``: one self-contained page (inline CSS and SVG, no script, no network) for a result."""

from __future__ import annotations

from html import escape

from perf_callbacks.analysis.measures_html import measure_sections
from perf_callbacks.analysis.mfu import mfu_lines
from perf_callbacks.analysis.modules_text import module_section
from perf_callbacks.analysis.result import AnalysisResult, RankResult
from perf_callbacks.analysis.strip import WIDTH, decode
from perf_callbacks.analysis.text import verdict_line
from perf_callbacks.analysis.timeline import CAUSES

COLORS = {
    "compute": "#2e7d32",
    "copy": "#0277bd",
    "communication": "#6a1b9a",
    "input": "#ef6c00",
    "sync": "#c62828",
    "host": "#f9a825",
    "other": "#9e9e9e",
    "backlog": "#90a4ae",
}
_WIDTH = WIDTH
_CSS = """body{font:14px sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
.verdict{font-size:22px;font-weight:bold;color:#c62828}.verdict.close{color:#8d6e00}
.verdict.ok{color:#2e7d32}.key span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}"""


def render_html(result: AnalysisResult) -> str:
    """Render the report as one HTML page.

    The page holds the verdict, the recommendations, per-step stacked bars by cause and a timeline strip for each
    rank, and the top-ops table; then the same for every other window and trace set.

    Example:
        >>> from perf_callbacks.analysis.result import AnalysisResult
        >>> page = render_html(AnalysisResult("t.json", "compute_bound", None, 0.0, None, [], None, [], []))
        >>> page.startswith("<!DOCTYPE html>") and "http" not in page
        True
    """
    parts = [f"<h1>perf-callbacks report: {escape(result.path)}</h1>", *_window(result)]
    notes = result.notes + [f"skipped: {e}" for e in result.errors]
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    for other in result.others:
        partial = " (partial)" if other.partial else ""
        parts += [f"<hr><h1>{escape(other.path)}{partial}</h1>", *_window(other)]
    body = "\n".join(parts)
    return f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>perf-callbacks report</title>' \
           f"<style>{_CSS}</style></head><body>{body}</body></html>"


def _window(result: AnalysisResult) -> list[str]:
    gpu = "no device in the trace" if result.gpu_utilization is None else \
        f"GPU utilization {result.gpu_utilization:.1%}"
    css = "verdict close" if result.verdict_note else "verdict ok" if result.verdict == "compute_bound" else "verdict"
    parts = [
        f'<p class="{css}">{escape(verdict_line(result))}</p>',
        f"<p>{gpu} &middot; data wait {result.data_wait_fraction:.1%} &middot; "
        f"stragglers {escape(str(result.stragglers or 'none'))}</p>",
        *(f"<p>{escape(line)}</p>" for line in mfu_lines(vars(result))),
        "<h2>Recommendations</h2><ol>" + "".join(f"<li>{escape(t)}</li>" for t in result.recommendations) + "</ol>",
        "<h2>Time by cause</h2>" + _legend(),
    ]
    for r in result.ranks:
        parts.append(f"<h3>rank {r.rank}: {escape(r.verdict)}</h3>" + _step_bars(r) + _strip(r))
    parts.append("<h2>Top ops</h2>" + _ops_table(result))
    parts += measure_sections(result)
    parts += module_section(result)
    return parts


def _legend() -> str:
    items = "".join(f'<span><i class="sw" style="background:{COLORS[c]}"></i>{c}</span>' for c in CAUSES)
    return f'<p class="key">{items}</p>'


def _step_bars(r: RankResult) -> str:
    """One horizontal bar per step, its length the step's window, split by cause."""
    if not r.steps:
        return "<p>no ProfilerStep spans</p>"
    longest = max(sum(s.causes_ms.values()) for s in r.steps) or 1.0
    rows = []
    for i, s in enumerate(r.steps):
        y, x = i * 26, 110.0
        rows.append(f'<text x="0" y="{y + 15}">step {s.step} {s.time_ms:.1f} ms</text>')
        for cause in CAUSES:
            w = s.causes_ms.get(cause, 0.0) / longest * (_WIDTH - 120)
            if w > 0:
                rows.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="20" fill="{COLORS[cause]}">'
                            f"<title>{cause}: {s.causes_ms[cause]:.2f} ms</title></rect>")
                x += w
    height = len(r.steps) * 26
    return f'<svg width="{_WIDTH}" height="{height}">{"".join(rows)}</svg>'


def _strip(r: RankResult) -> str:
    """Return the window as a strip of pixels, each coloured by the cause that fills most of it (``r.strip``)."""
    pixels = decode(r.strip)
    if not pixels:
        return ""
    rects = "".join(f'<rect x="{px}" y="0" width="1" height="24" fill="{COLORS[cause]}"/>'
                    for px, cause in enumerate(pixels) if cause is not None)
    ms = (r.end_us - r.start_us) / 1e3
    return f'<p>timeline ({ms:.1f} ms)</p><svg width="{_WIDTH}" height="24">{rects}</svg>'


def _ops_table(result: AnalysisResult) -> str:
    rows = "".join(
        f"<tr><td>{escape(o['name'])}</td><td>{o['device']}</td><td>{o['self_time_us'] / 1e3:.2f}</td>"
        f"<td>{o['fraction']:.1%}</td><td>{o['count']}</td></tr>"
        for o in result.top_ops
    )
    return f"<table><tr><th>op</th><th>device</th><th>self ms</th><th>share</th><th>count</th></tr>{rows}</table>"

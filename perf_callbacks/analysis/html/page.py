"""``render_html``: one self-contained page (inline CSS, SVG and a small script; no network) for a result."""

from __future__ import annotations

from html import escape

from perf_callbacks.analysis.compute.mfu import mfu_lines
from perf_callbacks.analysis.compute.modules_text import module_section
from perf_callbacks.analysis.html.chart import COLORS
from perf_callbacks.analysis.html.gains import recommendations_table
from perf_callbacks.analysis.html.measures import measure_sections
from perf_callbacks.analysis.html.ranks import rank_charts
from perf_callbacks.analysis.html.roofline import roofline_sections
from perf_callbacks.analysis.html.run import run_overview
from perf_callbacks.analysis.html.window import WINDOW_CHARTS
from perf_callbacks.analysis.html.zoom import zoom_script
from perf_callbacks.analysis.render.text import culprit_line, verdict_line
from perf_callbacks.analysis.results.result import AnalysisResult
from perf_callbacks.analysis.windows.hang import hang_html

__all__ = ["COLORS", "render_html"]

_CSS = """body{font:14px sans-serif;margin:24px;color:#222;max-width:1000px}h1{font-size:20px}
h2{font-size:17px;margin-top:30px;border-bottom:1px solid #ddd}h3{font-size:14px;margin:18px 0 4px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
.verdict{font-size:22px;font-weight:bold;color:#c62828}.verdict.close{color:#8d6e00}
.verdict.ok{color:#2e7d32}.key{margin:2px 0}.key span{display:inline-block;margin-right:14px;font-size:12px}
.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
figure{margin:8px 0 18px}figcaption{color:#555;font-size:13px;font-style:italic}
svg.chart text{font:11px sans-serif;fill:#333}svg.chart text.value{fill:#666}svg.chart text.straggler{fill:#c62828;
font-weight:bold}svg.chart rect:hover{stroke:#000;stroke-width:1}section.window{margin-top:36px}
details summary{cursor:pointer;font-weight:bold;margin-top:18px}.zoomctl{font-size:12px;color:#555;margin:2px 0}"""


def render_html(result: AnalysisResult) -> str:
    """Render the report as one HTML page.

    With several windows, the page opens with the run window by window (``html_run``); then each window: its
    verdict, figures and recommendations, its charts (``html_window.WINDOW_CHARTS``), the ranks side by side
    (``html_ranks``), and the tables behind the charts. Inline CSS and SVG, and the timeline's zoom as one inline
    script (``html_zoom``): no network.

    Example:
        >>> from perf_callbacks.analysis.results.result import AnalysisResult
        >>> page = render_html(AnalysisResult("t.json", "compute_bound", None, 0.0, None, [], [], []))
        >>> page.startswith("<!DOCTYPE html>") and "http" not in page
        True
    """
    windows = [result, *result.others]
    anchors = {id(w): f"w{i}" for i, w in enumerate(windows)}
    parts = [f"<h1>perf-callbacks report: {escape(result.path)}</h1>", run_overview(windows, anchors)]
    if result.hang:
        parts.insert(1, hang_html(result.hang))
    for i, w in enumerate(windows):
        partial = " (partial)" if w.partial else ""
        head = f"<h1>{escape(w.path)}{partial}</h1>" if i else ""
        parts.append(f'<section class="window" id="w{i}">{head}{"".join(_window(w))}')
        notes = w.notes + [f"skipped: {e}" for e in w.errors] if not i else []
        if notes:
            parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
        parts.append("</section>")
    body = "\n".join(parts)
    return f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>perf-callbacks report</title>' \
           f"<style>{_CSS}</style></head><body>{body}{zoom_script(body)}</body></html>"


def _culprit(result: AnalysisResult) -> list[str]:
    """The culprit by arrival order and the merged timeline's path, with several ranks."""
    if len(result.ranks) < 2:
        return []
    out = [f'<p class="culprit">culprit (arrival order): {escape(culprit_line(result))}</p>']
    if result.merged_trace:
        out.append(f"<p>all ranks on one timeline (Perfetto, chrome://tracing): "
                   f"<code>{escape(result.merged_trace)}</code></p>")
    return out


def _window(result: AnalysisResult) -> list[str]:
    gpu = "no device in the trace" if result.gpu_utilization is None else \
        f"GPU utilization {result.gpu_utilization:.1%}"
    css = "verdict close" if result.verdict_note else "verdict ok" if result.verdict == "compute_bound" else "verdict"
    parts = [
        f'<p class="{css}">{escape(verdict_line(result))}</p>',
        f"<p>{gpu} &middot; data wait {result.data_wait_fraction:.1%} &middot; "
        f"stragglers {escape(str(result.stragglers or 'none'))}</p>",
        *_culprit(result),
        *(f"<p>{escape(line)}</p>" for line in mfu_lines(vars(result.efficiency))),
        "<h2>What to change first</h2>" + recommendations_table(result.recommendations),
        "<h2>Where the time goes</h2>",
    ]
    parts += [chart(result) for chart in WINDOW_CHARTS]
    parts.append(rank_charts(result))
    parts += roofline_sections(result.measures.roofline, result.measures.precision)
    parts.append("<details><summary>The figures behind the charts</summary><h2>Top ops</h2>" + _ops_table(result))
    parts += measure_sections(result)
    parts += module_section(result)
    parts.append("</details>")
    return parts


def _ops_table(result: AnalysisResult) -> str:
    rows = "".join(
        f"<tr><td>{escape(o['name'])}</td><td>{o['device']}</td><td>{o['self_time_us'] / 1e3:.2f}</td>"
        f"<td>{o['fraction']:.1%}</td><td>{o['count']}</td></tr>"
        for o in result.top_ops
    )
    return f"<table><tr><th>op</th><th>device</th><th>self ms</th><th>share</th><th>count</th></tr>{rows}</table>"

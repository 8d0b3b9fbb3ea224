"""``render_diff_html``: one self-contained page (inline CSS and SVG, no script, no network) for a ``DiffResult``."""

from __future__ import annotations

from html import escape
from typing import Any

from perf_callbacks.analysis.diff.compare import DiffResult
from perf_callbacks.analysis.diff.gains import estimate_lines
from perf_callbacks.analysis.diff.measures import measure_diff_html
from perf_callbacks.analysis.diff.memory import category_diff_lines
from perf_callbacks.analysis.html.chart import AXIS_H, Scale, axis, scale_to
from perf_callbacks.analysis.html.diff_charts import change_chart, step_time_chart
from perf_callbacks.analysis.html.page import COLORS
from perf_callbacks.analysis.html.run import window_mean
from perf_callbacks.analysis.html.window import drawn_causes
from perf_callbacks.analysis.measures.text import size
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult, StepResult
from perf_callbacks.analysis.trace.timeline import CAUSES

_HALF = 420
_ROW = 24
_CSS = """body{font:14px sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}td.n{text-align:right}
.summary{font-size:17px;font-weight:bold}.regression{color:#c62828}.improvement{color:#2e7d32}.noise{color:#555}
.up{color:#c62828}.down{color:#2e7d32}.key span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
figure{margin:8px 0 18px}figcaption{color:#555;font-size:13px;font-style:italic}svg.chart text{font:11px sans-serif}
svg.chart text.value{fill:#666}"""


def render_diff_html(d: DiffResult, top_k: int = 25) -> str:
    """Render the comparison as one HTML page.

    The page holds the verdict change and new recommendations, the summary, the headline figures, the time-by-cause
    bars of both sides side by side (mean step, then step by step per rank), and the op table with deltas.

    Example:
        >>> from perf_callbacks.analysis.diff.compare import compare
        >>> from perf_callbacks.analysis.results.result import AnalysisResult, RankResult, StepResult
        >>> steps = [StepResult(i, 10.0 + i, {"compute": 9.0, "input": 1.0 + i}) for i in range(3)]
        >>> rank = RankResult(0, "t", 1.0, None, None, 11.0, 0.1, {}, steps, {}, {}, [], [], None, [],
        ...                   {}, None)
        >>> run = AnalysisResult("t", "compute_bound", None, 0.1, 11.0, [], [], [rank])
        >>> page = render_diff_html(compare(run, run))
        >>> page.startswith("<!DOCTYPE html>") and "http" not in page and "within noise" in page
        True
    """
    v = d.verdict
    verdict = escape(v["new"]) + " (unchanged)" if v["base"] == v["new"] else f"{escape(v['base'])} &rarr; " \
        f"<b>{escape(v['new'])}</b>"
    parts = [
        "<h1>perf-callbacks diff</h1>",
        f"<p>base: {escape(d.base.get('window', d.base['path']))}<br>new: {escape(d.new.get('window', d.new['path']))}"
        "</p>",
        f"<p>verdict: {verdict}</p>",
    ]
    if d.recommendations.get("added"):
        parts.append("<p>new recommendations:</p><ol>" +
                     "".join(f"<li>{escape(t)}</li>" for t in d.recommendations["added"]) + "</ol>")
    parts += [
        f'<p class="summary {_outcome_class(d)}">{escape(d.summary)}</p>',
        f"<p>{escape(d.step_time_ms['noise'])}</p>",
    ]
    estimates = estimate_lines(d.estimates)
    if estimates:
        parts.append(f"<p>{escape(estimates[0])}</p><ol>" + "".join(f"<li>{escape(x.split('. ', 1)[1])}</li>"
                                                                      for x in estimates[1:]) + "</ol>")
    parts += ["<h2>Figures</h2>" + _figures(d), step_time_chart(d), change_chart(d),
              "<h2>Time by cause, ms per step</h2>" + _legend()]
    if d.base_result is not None and d.new_result is not None:
        parts.append(_mean_bars(d.base_result, d.new_result))
        parts += [_rank_bars(a, b) for a, b in _rank_pairs(d.base_result, d.new_result)]
    parts.append("<h2>Ops, self time per step</h2>" + _ops_table(d, top_k))
    parts.append(measure_diff_html(d.measures))
    if categories := category_diff_lines(d.memory_categories):
        parts.append("<h2>Memory peak by category</h2><pre>" + escape("\n".join(categories)) + "</pre>")
    return f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>perf-callbacks diff</title>' \
           f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>"


def _outcome_class(d: DiffResult) -> str:
    return {"regression": "regression", "improvement": "improvement"}.get(d.outcome, "noise")


def _figures(d: DiffResult) -> str:
    st = d.step_time_ms
    rows = [("step time (median)", f"{st['base']:.2f} ms", f"{st['new']:.2f} ms", _signed(st["change"], " ms"))]
    for name, key in (("GPU utilization", "gpu_utilization"), ("data wait", "data_wait_fraction"), ("MFU", "mfu")):
        f = getattr(d, key)
        if key == "mfu" and (not f or (f["base"] is None and f["new"] is None)):
            continue
        rows.append((name, _pct(f["base"]), _pct(f["new"]), _signed(None if f["change"] is None else f["change"] * 100,
                                                                    " pts")))
    mem = d.peak_memory_bytes
    rows.append(("peak memory", size(mem["base"]), size(mem["new"]),
                 "n/a" if mem["change"] is None else ("+" if mem["change"] > 0 else "") + size(mem["change"])))
    body = "".join(f"<tr><td>{n}</td><td class=n>{a}</td><td class=n>{b}</td><td class=n>{c}</td></tr>"
                   for n, a, b, c in rows)
    return f"<table><tr><th>figure</th><th>base</th><th>new</th><th>change</th></tr>{body}</table>"


def _legend() -> str:
    items = "".join(f'<span><i class="sw" style="background:{COLORS[c]}"></i>{c}</span>'
                    for c in CAUSES)
    return f'<p class="key">{items}</p>'


def _mean_bars(base: AnalysisResult, new: AnalysisResult) -> str:
    a, b = window_mean(base), window_mean(new)
    scale = max(sum(a.values()), sum(b.values())) or 1.0
    rows = [("mean step", a, b)]
    return "<h3>mean step (all ranks)</h3>" + _pair_svg(rows, scale)


def _rank_pairs(base: AnalysisResult, new: AnalysisResult) -> list[tuple[RankResult, RankResult]]:
    others = {r.rank: r for r in new.ranks}
    return [(r, others[r.rank]) for r in base.ranks if r.rank in others and (r.steps or others[r.rank].steps)]


def _rank_bars(a: RankResult, b: RankResult) -> str:
    """Step i of base beside step i of new, both on one scale, one row per step."""
    n = max(len(a.steps), len(b.steps))
    pad: list[StepResult | None] = [None] * n
    sa, sb = (list(a.steps) + pad)[:n], (list(b.steps) + pad)[:n]
    scale = max((sum(drawn_causes(s).values()) for s in a.steps + b.steps), default=0.0) or 1.0
    rows = [(f"{_label(x)} | {_label(y)}", drawn_causes(x) if x else {}, drawn_causes(y) if y else {})
            for x, y in zip(sa, sb, strict=True)]
    return f"<h3>rank {a.rank}: base | new, step by step</h3>" + _pair_svg(rows, scale)


def _label(s: StepResult | None) -> str:
    return "-" if s is None else f"#{s.step} {s.time_ms:.1f}"


def _pair_svg(rows: list[tuple[str, dict[str, float], dict[str, float]]], scale: float) -> str:
    """Base on the left, new on the right: the same scale, each half with its axis in ms."""
    left, right = (scale_to(scale, "ms", x, x + _HALF) for x in (200, 270 + _HALF))
    out = []
    for i, (label, a, b) in enumerate(rows):
        y = i * _ROW + 18
        out.append(f'<text x="0" y="{y + 14}">{escape(label)}</text>')
        out += _bar(a, left.x0, y, left, "base") + _bar(b, right.x0, y, right, "new")
    head = f'<text x="200" y="12">base</text><text x="{right.x0}" y="12">new</text>'
    bottom = len(rows) * _ROW + 20
    axes = axis(left, bottom) + axis(right, bottom)
    return f'<svg class="chart pair" width="{330 + 2 * _HALF}" height="{bottom + AXIS_H}">{head}{"".join(out)}' \
           f"{axes}</svg>"


def _bar(causes: dict[str, float], x: float, y: int, scale: Scale, side: str) -> list[str]:
    out = []
    for cause in CAUSES:
        w = scale.length(causes.get(cause, 0.0))
        if w > 0:
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{_ROW - 4}" fill="{COLORS[cause]}">'
                       f"<title>{side}: {cause} {causes[cause]:.2f} ms</title></rect>")
            x += w
    return out


def _ops_table(d: DiffResult, top_k: int) -> str:
    tagged = [(t, o) for t, key in (("both", "matched"), ("new only", "added"), ("base only", "removed"))
              for o in d.ops[key]]
    tagged.sort(key=lambda to: -abs(to[1]["change_ms"]))
    body = "".join(_op_row(tag, o) for tag, o in tagged[:top_k])
    head = "<tr><th>op</th><th>device</th><th>in</th><th>base ms/step</th><th>new ms/step</th><th>change</th>" \
           "<th>calls</th><th>ms per call</th></tr>"
    more = f"<p>{len(tagged) - top_k} more ops in --json</p>" if len(tagged) > top_k else ""
    return f"<table>{head}{body}</table>{more}"


def _op_row(tag: str, o: dict[str, Any]) -> str:
    a, b = o["base"], o["new"]
    cls = "up" if o["change_ms"] > 0 else "down" if o["change_ms"] < 0 else ""
    return (f"<tr><td>{escape(o['name'])}</td><td>{escape(o['device'])}</td><td>{tag}</td>"
            f"<td class=n>{a['per_step_ms']:.3f}</td><td class=n>{b['per_step_ms']:.3f}</td>"
            f'<td class="n {cls}">{o["change_ms"]:+.3f}</td><td class=n>{a["count"]} &rarr; {b["count"]}</td>'
            f"<td class=n>{a['per_call_ms']:.3f} &rarr; {b['per_call_ms']:.3f}</td></tr>")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _signed(x: float | None, unit: str) -> str:
    return "n/a" if x is None else f"{x:+.2f}{unit}"

"""Zoom on the window's timeline, checked from the DOM headless Chromium builds after simulated wheel, drag, keys and
double-click events: the axes' range narrows and their ticks follow, the bars shown are a subset, the memory curve
keeps the timeline's range, and a reset brings back the window's full range."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, render_html
from perf_callbacks.analysis.results.result import AnalysisResult
from tests.analysis.chromium_pages import CHROMIUM, Chart, charts, dump_dom
from tests.analysis.conftest import fixture_trace

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package")

_EVENTS = """<script>(function(){
var tl=document.querySelector("svg.chart.timeline"),b=tl.getBoundingClientRect();
function at(x){return b.left+x*b.width/960}
function opts(x){return{clientX:at(x),clientY:b.top+5,button:0,bubbles:true,cancelable:true}}
function wheel(x,dy){tl.dispatchEvent(new WheelEvent("wheel",Object.assign(opts(x),{deltaY:dy})))}
function drag(a,z){tl.dispatchEvent(new MouseEvent("mousedown",opts(a)));
window.dispatchEvent(new MouseEvent("mousemove",opts(z)));window.dispatchEvent(new MouseEvent("mouseup",opts(z)))}
function key(k){tl.dispatchEvent(new KeyboardEvent("keydown",{key:k,bubbles:true,cancelable:true}))}
function mark(name){var a=tl.querySelector("g.axis").dataset;document.body.setAttribute("data-"+name,a.lo+","+a.hi)}
%s
})()</script>"""


def _sync_bound() -> AnalysisResult:
    return analyze(fixture_trace("sync_bound"), sidecars=False)


def _after(result: AnalysisResult, tmp_path: Path, actions: str, name: str) -> tuple[Chart, Chart, str]:
    """The timeline and memory charts once ``actions`` (calls of the helpers in ``_EVENTS``) have run on the page."""
    page = render_html(result).replace("</body>", _EVENTS % actions + "</body>")
    path = tmp_path / f"{name}.html"
    path.write_text(page, encoding="utf-8")
    dom = dump_dom(path, tmp_path)
    found, _ = charts(dom)
    (timeline,) = [c for c in found if c.kind == "timeline"]
    (memory,) = [c for c in found if c.kind == "memory"]
    return timeline, memory, dom


def _range(chart: Chart) -> tuple[float, float]:
    (ax,) = chart.axes
    return float(ax["data-lo"]), float(ax["data-hi"])


def _ticks(chart: Chart) -> list[float]:
    return [float(t) for a, t in chart.texts if a.get("text-anchor") == "middle"]


def _bars(chart: Chart) -> list[dict[str, str]]:
    """The timeline's bars (the zoom's clip path is a rect without a fill)."""
    return [r for r in chart.rects if "fill" in r]


def _shown(chart: Chart) -> list[tuple[str, str]]:
    """The bars drawn (not hidden by the zoom), by their hover text (the bars and titles come in the same order)."""
    return [(r.get("x", ""), t) for r, t in zip(_bars(chart), chart.titles, strict=True)
            if "none" not in r.get("style", "")]


def test_the_wheel_zooms_the_timeline_and_the_memory_curve_together(tmp_path: Path) -> None:
    result = _sync_bound()
    before, before_memory, _ = _after(result, tmp_path, "", "before")
    timeline, memory, _ = _after(result, tmp_path, "wheel(400,-100);wheel(400,-100);wheel(400,-100)", "wheel")
    lo0, hi0 = _range(before)
    lo, hi = _range(timeline)
    assert lo0 < lo < hi < hi0 and hi - lo == pytest.approx(0.8**3 * (hi0 - lo0), rel=1e-6)
    assert timeline.axes == memory.axes  # the memory curve keeps the timeline's time range
    ticks, ticks0 = _ticks(timeline), _ticks(before)
    assert len(ticks) >= 3 and lo <= ticks[0] and ticks[-1] <= hi
    assert ticks[-1] - ticks[0] < ticks0[-1] - ticks0[0] and ticks[0] > ticks0[0]
    assert _ticks(memory) == ticks
    shown_titles = {t for _, t in _shown(timeline)}
    all_titles = {t for _, t in _shown(before)}
    assert shown_titles < all_titles and shown_titles  # a strict subset of the bars
    x0, x1 = (float(timeline.axes[0][k]) for k in ("data-x0", "data-x1"))
    for r in _bars(timeline):
        if "none" not in r.get("style", ""):
            assert x0 - 0.01 <= float(r["x"]) and float(r["x"]) + float(r["width"]) <= x1 + 0.01
    # the memory curve is drawn at its times on the zoomed axis (and clipped to the plotting area)
    (line,), (line0,) = memory.polylines, before_memory.polylines
    assert line["clip-path"].startswith("url(#zc")
    t_first = lo0 + (float(line0["points"].split()[0].split(",")[0]) - x0) / (x1 - x0) * (hi0 - lo0)
    x_first = float(line["points"].split()[0].split(",")[0])
    assert x_first == pytest.approx(x0 + (t_first - lo) / (hi - lo) * (x1 - x0), abs=0.2)


def test_a_drag_zooms_to_the_range_selected(tmp_path: Path) -> None:
    timeline, memory, _ = _after(_sync_bound(), tmp_path, "drag(350,530)", "drag")
    (ax,) = timeline.axes
    lo0, x0, x1 = 0.0, float(ax["data-x0"]), float(ax["data-x1"])
    hi0 = float(_after(_sync_bound(), tmp_path, "", "plain")[0].axes[0]["data-hi"])
    lo, hi = _range(timeline)
    assert lo == pytest.approx(lo0 + (350 - x0) / (x1 - x0) * hi0, rel=0.01)
    assert hi == pytest.approx(lo0 + (530 - x0) / (x1 - x0) * hi0, rel=0.01)
    assert _range(memory) == (lo, hi)
    assert not [r for r in timeline.rects if "fill-opacity" in r]  # the selection box is gone


def test_keys_zoom_and_pan_and_a_double_click_or_the_button_resets(tmp_path: Path) -> None:
    result = _sync_bound()
    before, before_memory, _ = _after(result, tmp_path, "", "before")
    actions = ("key('+');key('ArrowRight');mark('keys');tl.dispatchEvent(new MouseEvent('dblclick',opts(400)));"
               "mark('dbl');wheel(300,-100);mark('wheel');document.querySelector('.zoomctl button').click()")
    timeline, memory, dom = _after(result, tmp_path, actions, "reset")
    lo0, hi0 = _range(before)
    marks = {k: tuple(float(v) for v in s.split(",")) for k, s in re.findall(r'data-(\w+)="([0-9.e+-]+,[0-9.e+-]+)"',
                                                                            dom)}
    w = hi0 - lo0
    assert marks["keys"] == pytest.approx((lo0 + w / 4 + w / 10, hi0 - w / 4 + w / 10))  # zoomed in, then panned
    assert marks["dbl"] == (lo0, hi0)
    assert marks["wheel"][1] - marks["wheel"][0] < w  # zoomed again before the button
    assert timeline.axes == before.axes and memory.axes == before_memory.axes
    assert _ticks(timeline) == _ticks(before)
    assert [(r["x"], r["width"]) for r in _bars(timeline)] == [(r["x"], r["width"]) for r in _bars(before)]
    assert _shown(timeline) == _shown(before)
    assert memory.polylines[0]["points"].split() == before_memory.polylines[0]["points"].split()

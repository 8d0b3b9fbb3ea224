"""The HTML page's charts, checked from the DOM headless Chromium builds: axes with units, one scale for all ranks,
one time axis for the timeline and the memory curve, the run window by window, and no request leaving the page."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, compare, render_html
from perf_callbacks.analysis.html.diff_page import render_diff_html
from perf_callbacks.cli import main
from tests.analysis.chromium_pages import CHROMIUM, Chart, charts, dump_dom, page_requests
from tests.analysis.conftest import fixture_trace
from tests.analysis.synthetic_results import result, with_measures

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package")


def _dom(page: str, tmp_path: Path, name: str = "page") -> tuple[list[Chart], list[str]]:
    path = tmp_path / f"{name}.html"
    path.write_text(page, encoding="utf-8")
    return charts(dump_dom(path, tmp_path))


def _kind(found: list[Chart], kind: str) -> Chart:
    (chart,) = [c for c in found if c.kind == kind]
    return chart


def _two_windows(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    for name, window in (("sync_bound", "window-000004-000006"), ("launch_bound_tiny_kernels", "window-000020-000022")):
        (run / window).mkdir(parents=True)
        shutil.copy(fixture_trace(name), run / window / "rank0.pt.trace.json.gz")
    return run


def test_every_chart_has_an_axis_with_ticks_and_units_and_a_caption(tmp_path: Path) -> None:
    page = tmp_path / "run.html"
    assert main(["report", str(_two_windows(tmp_path)), "--html", str(page)]) == 0
    dom = dump_dom(page, tmp_path)
    found, captions = charts(dom)
    kinds = {c.kind for c in found}
    assert {"windows", "steps", "timeline", "memory", "ops", "launch", "copies"} <= kinds
    for chart in found:
        assert chart.axes, chart.kind
        for ax in chart.axes:
            unit = ax["data-unit"]
            assert unit, chart.kind
            ticks = [t for a, t in chart.texts if a.get("text-anchor") == "middle"]
            assert len(ticks) >= 2 and ticks[0] in ("0", ax["data-lo"]), chart.kind
            assert any(a.get("class") == "unit" and t.startswith(unit) for a, t in chart.texts), chart.kind
    assert len(captions) == dom.count("<figure>") >= 7  # every chart's figure has its caption
    assert all(len(c) > 40 for c in captions)
    more, captions = _dom(render_html(with_measures(result([[100.0, 100.0], [140.0, 140.0]]))), tmp_path, "more")
    assert {"mfu", "launch", "copies", "collectives", "ranks", "heatmap", "waits"} <= {c.kind for c in more}
    for chart in more:
        assert chart.axes and all(ax["data-unit"] for ax in chart.axes), chart.kind
        assert any(a.get("class") == "unit" for a, _ in chart.texts), chart.kind
    assert len(captions) == len(more) - 1  # one figure holds the timeline and the memory curve


def test_ranks_that_differ_by_40_percent_draw_bars_40_percent_apart(tmp_path: Path) -> None:
    found, _ = _dom(render_html(result([[100.0, 100.0], [140.0, 140.0]], stragglers=(1,))), tmp_path)
    for kind in ("steps", "ranks"):
        widths = sorted(_kind(found, kind).rows().values())
        assert widths[-1] / widths[0] == pytest.approx(1.4, rel=0.01), kind
    ranks = _kind(found, "ranks")
    assert [t for a, t in ranks.texts if a.get("class") == "straggler"] == ["rank 1 straggler"]


def test_the_last_steps_bar_stops_at_the_steps_end(tmp_path: Path) -> None:
    """The device tail after the last step (here 60 ms) is not drawn into its bar: 100 ms steps draw equal bars."""
    found, _ = _dom(render_html(result([[100.0, 100.0, 100.0]], tail_ms=60.0)), tmp_path)
    widths = list(_kind(found, "steps").rows().values())
    assert len(widths) == 3 and max(widths) == pytest.approx(min(widths), rel=0.01)
    real = analyze(fixture_trace("compute_bound"))  # its last step's device tail made a 147.6 ms step 3x as wide
    found, _ = _dom(render_html(real), tmp_path, "real")
    widths = [w for _, w in sorted(_kind(found, "steps").rows().items())]
    times = [s.time_ms for s in real.ranks[0].steps]
    assert [w / widths[0] for w in widths] == pytest.approx([t / times[0] for t in times], rel=0.01)


def test_the_timeline_and_the_memory_curve_share_one_time_axis(tmp_path: Path) -> None:
    r = analyze(fixture_trace("sync_bound"))
    found, _ = _dom(render_html(r), tmp_path)
    timeline, memory = _kind(found, "timeline"), _kind(found, "memory")
    (t_axis,), (m_axis,) = timeline.axes, memory.axes
    assert t_axis == m_axis and t_axis["data-unit"] == "ms"
    lo, hi, x0, x1 = (float(t_axis[k]) for k in ("data-lo", "data-hi", "data-x0", "data-x1"))
    span_ms = (r.ranks[0].end_us - r.ranks[0].start_us) / 1e3
    assert lo == 0.0 and span_ms <= hi < 1.5 * span_ms
    drawn_end = max(float(b["x"]) + float(b["width"]) for b in timeline.rects)
    assert drawn_end == pytest.approx(x0 + span_ms / hi * (x1 - x0), abs=1.5)  # the strip ends at the window's end
    last_t = r.ranks[0].memory.curve[-1][0]
    last_x = float(memory.polylines[0]["points"].split()[-1].split(",")[0])
    assert last_x == pytest.approx(x0 + last_t / hi * (x1 - x0), abs=0.2)  # memory at its time on the same axis


def test_long_kernel_names_are_shortened_with_the_full_name_on_hover(tmp_path: Path) -> None:
    found, _ = _dom(render_html(result([[100.0]])), tmp_path)
    ops = _kind(found, "ops")
    names = [t for a, t in ops.texts if a.get("text-anchor") == "end"]
    assert names[1] == "aten::mm" and names[0].startswith("void cutlass") and len(names[0]) <= 26
    full = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)"
    assert full in ops.titles  # on the label
    assert any(t.startswith(f"{full}: 5.00 ms self on cuda") for t in ops.titles)  # and on the bar


@pytest.mark.parametrize("world", [8, 64])
def test_many_ranks_fit_and_the_straggler_is_marked(tmp_path: Path, world: int) -> None:
    slow = world - 3
    steps = [[100.0 + (30.0 if r == slow else r % 3)] * 4 for r in range(world)]
    found, _ = _dom(render_html(result(steps, stragglers=(slow,))), tmp_path)
    heat = _kind(found, "heatmap")
    assert len([b for b in heat.rects if b.get("class") == "cell"]) == world * 4
    assert [t for a, t in heat.texts if a.get("class") == "straggler"] == [f"rank {slow} straggler"]
    ranks = _kind(found, "ranks")
    widths = [w for _, w in sorted(ranks.rows().items())]
    assert len(widths) == world and widths.index(max(widths)) == slow
    assert max(ranks.rows()) < (20 if world <= 16 else 14) * world  # 64 rows in under 900 pixels
    assert [t for a, t in ranks.texts if a.get("text-anchor") == "end"][slow] == f"rank {slow} straggler"
    shown = world if world <= 8 else 2  # past 8 ranks the step bars keep rank 0 and the straggler
    assert len(_kind(found, "steps").rows()) == shown * 4
    assert len(_kind(found, "timeline").rects) >= world  # every rank's strip


def test_the_run_overview_lists_windows_in_step_order_from_sidecars(tmp_path: Path) -> None:
    run = _two_windows(tmp_path)
    from perf_callbacks.analysis.sidecar import write_sidecar

    for trace in run.glob("*/rank0.pt.trace.json.gz"):
        write_sidecar(trace)
    page = tmp_path / "run.html"
    assert main(["report", str(run), "--html", str(page)]) == 0
    found, _ = charts(dump_dom(page, tmp_path))
    labels = [t for a, t in _kind(found, "windows").texts if a.get("text-anchor") == "end"]
    assert labels == ["steps 4-6", "steps 20-22"]


def test_no_request_leaves_the_page(tmp_path: Path) -> None:
    control = tmp_path / "control.html"
    control.write_text('<html><body><img src="http://192.0.2.1/x.png"></body></html>')
    assert page_requests(control, tmp_path) == ["http://192.0.2.1/x.png"]  # the net log sees a page's request
    page = tmp_path / "run.html"
    assert main(["report", str(_two_windows(tmp_path)), "--html", str(page)]) == 0
    assert page_requests(page, tmp_path) == []


def test_the_diff_draws_both_runs_on_one_axis_and_marks_the_change_beyond_noise(tmp_path: Path) -> None:
    base = result([[100.0 + i % 3 for i in range(8)]])
    new = result([[140.0 + i % 3 for i in range(8)]])
    found, captions = _dom(render_diff_html(compare(base, new)), tmp_path)
    steptime = _kind(found, "steptime beyond-the-noise")
    widths = sorted(steptime.rows().values())
    assert widths[1] / widths[0] == pytest.approx(141.0 / 101.0, rel=0.01)
    pair, *_ = [c for c in found if c.kind == "pair"]
    left, right = pair.axes
    assert (left["data-lo"], left["data-hi"]) == (right["data-lo"], right["data-hi"])
    assert float(left["data-x1"]) - float(left["data-x0"]) == float(right["data-x1"]) - float(right["data-x0"])
    change = _kind(found, "change")
    assert [b.get("fill") for b in change.rects if b.get("class") == "change"][0] == "#c62828"  # slower: red
    for chart in found:
        assert chart.axes and all(a["data-unit"] == "ms" for a in chart.axes), chart.kind
    same, _ = _dom(render_diff_html(compare(base, base)), tmp_path, "same")
    assert [c.kind for c in same if c.kind.startswith("steptime")] == ["steptime within-the-noise"]


def test_the_timeline_names_the_longest_kernel_of_each_run_on_hover(tmp_path: Path) -> None:
    r = analyze(fixture_trace("sync_bound"), sidecars=False)
    found, _ = _dom(render_html(r), tmp_path)
    titles = _kind(found, "timeline").titles
    named = [t for t in titles if "; longest: " in t]
    assert named and all(t.startswith("rank 0 compute: ") for t in named)
    assert any("; longest: void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>" in t for t in named)

"""The pages' small display promises, read from the HTML they produce: labels that fit, memory in its own unit, one
name per cause on the report and the diff page, and every column of the diff's op table labelled."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, compare, render_html
from perf_callbacks.analysis.html.chart import hbars
from perf_callbacks.analysis.html.diff_page import render_diff_html
from perf_callbacks.analysis.html.run import run_overview
from perf_callbacks.analysis.trace.timeline import CAUSES
from tests.analysis.chromium_pages import CHROMIUM, charts, dump_dom
from tests.analysis.conftest import fixture_trace

_LEFT_EDGES = """<script>for (const t of document.querySelectorAll("svg.chart text"))
  t.setAttribute("data-left", t.getBBox().x.toFixed(1));</script></body>"""
"""Writes where the browser drew each chart text's left edge (SVG pixels) into the DOM that Chromium dumps."""


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package")
def test_long_operator_labels_start_inside_the_chart(tmp_path: Path) -> None:
    page = render_html(analyze(fixture_trace("compute_bound"), sidecars=False))  # nvjet_sm90_tst_..._coopA_NTN...
    long = [(name, "x" * 40 + name) for name in ("mmmm", "WWWW", "iiii", "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA")]
    page = page.replace("</body>", hbars([(n, 1.0, h) for h, n in long], "ms", "probe") + "</body>")
    path = tmp_path / "page.html"
    path.write_text(page.replace("</body>", _LEFT_EDGES, 1), encoding="utf-8")
    found, _ = charts(dump_dom(path, tmp_path))
    labels = [(float(a["data-left"]), t) for c in found if c.kind in ("ops", "probe") for a, t in c.texts
              if a.get("text-anchor") == "end"]
    assert len(labels) >= 14 and any("…" in t for _, t in labels)
    assert [(x, t) for x, t in labels if x < 0] == []


def _axis_units(page: str, kind: str) -> list[str]:
    svg = re.search(rf'<svg class="chart {kind}".*?</svg>', page)
    assert svg, kind
    return re.findall(r'<text x="[\d.]+" y="[\d.]+" text-anchor="end">(?:<title>.*?</title>)?([\d.]+ \w+)</text>',
                      svg.group(0))


def test_memory_of_megabytes_is_drawn_in_megabytes() -> None:
    small = analyze(fixture_trace("launch_bound_tiny_kernels"), sidecars=False)  # peak 70.2 MB allocated
    assert small.memory.peak_bytes and 1e6 < small.memory.peak_bytes < 1e9
    levels = _axis_units(render_html(small), "memory")
    assert levels and all(v.endswith(" MB") for v in levels), levels
    assert float(levels[-1].split()[0]) >= 70  # the top level reaches the peak, in MB
    run = run_overview([small, small])
    assert 'class="chart windows-memory"' in run and 'data-unit="MB"' in run and "70.2 MB peak allocated" in run
    big = analyze(fixture_trace("compute_bound"), sidecars=False)  # 22.6 GB
    assert all(v.endswith(" GB") for v in _axis_units(render_html(big), "memory"))
    diff = render_diff_html(compare(small, small))
    row = re.search(r"<tr><td>peak memory</td>(.*?)</tr>", diff)
    assert row and "70.2 MB" in row.group(1) and "GB" not in row.group(1)


def _legend(page: str) -> list[str]:
    key = re.search(r'<p class="key">(.*?)</p>', page)
    assert key
    return [unescape(n) for n in re.findall(r"</i>([^<]+)</span>", key.group(1))]


def test_the_report_and_the_diff_name_each_cause_alike() -> None:
    base = analyze(fixture_trace("sync_bound"), sidecars=False)
    new = analyze(fixture_trace("input_bound"), sidecars=False)
    report, diff = render_html(new), render_diff_html(compare(base, new))
    assert _legend(report)[: len(CAUSES)] == _legend(diff) == list(CAUSES)
    for other in ("data wait", "host-device syncs", "host launch overhead"):  # the diff's names for input/sync/host
        assert f"{other} " not in re.sub(r"<td>data wait</td>", "", diff), other
    assert "input +" in diff  # the summary names the cause that grew as the report does


def test_every_column_of_the_diff_op_table_is_labelled() -> None:
    base = analyze(fixture_trace("sync_bound"), sidecars=False)
    new = analyze(fixture_trace("launch_bound_tiny_kernels"), sidecars=False)
    page = render_diff_html(compare(base, new))
    table = re.search(r"<h2>Ops, self time per step</h2><table>(.*?)</table>", page)
    assert table
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1))
    head = re.findall(r"<th>(.*?)</th>", rows[0])
    assert all(h.strip() for h in head), head
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows[1:]]
    assert cells and all(len(c) == len(head) for c in cells)
    for i, name in enumerate(head):  # no column left empty on every row
        assert any(c[i].strip() for c in cells), name
    assert {c[head.index("in")] for c in cells} <= {"both", "new only", "base only"}
    figures = re.search(r"<h2>Figures</h2><table><tr>(.*?)</tr>", page)
    assert figures and all(h.strip() for h in re.findall(r"<th>(.*?)</th>", figures.group(1)))

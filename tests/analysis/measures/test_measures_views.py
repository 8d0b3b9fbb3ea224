"""The communication, transfer, launch and memory figures in the HTML page, across ranks, in ``diff`` and as scalars."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from perf_callbacks.analysis import analyze, render_html
from perf_callbacks.analysis.diff.compare import compare
from perf_callbacks.analysis.diff.text import format_diff
from perf_callbacks.analysis.html.diff_page import render_diff_html
from tests.analysis import measure_truth as truth
from tests.analysis.measure_helpers import H200, NCCL, analyzed, approx, h200, raw
from tests.foreign import needs_foreign


def _two_ranks(tmp_path: Path, source: Path, slow_copies: float = 1.0) -> Path:
    """The same trace as rank 0 and rank 1 of one window; rank 1's memcpys last ``slow_copies`` times longer."""
    with gzip.open(source, "rt") as f:
        doc = json.load(f)
    window = tmp_path / "window-000004-000006"
    window.mkdir()
    for rank in (0, 1):
        events = json.loads(json.dumps(doc["traceEvents"]))
        for e in events:
            if rank and e.get("cat") == "gpu_memcpy":
                e["dur"] *= slow_copies
        info = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": 2}
        (window / f"rank{rank}.pt.trace.json").write_text(json.dumps({**doc, "distributedInfo": info,
                                                                      "traceEvents": events}))
    return window


def test_html_has_memory_curve_tables_and_no_network() -> None:
    page = render_html(analyzed(h200("launch_bound_tiny_kernels")))
    assert '<svg class="chart memory"' in page and "<polyline" in page
    assert "<h2>Transfers</h2>" in page and "<h2>Kernel launch</h2>" in page
    assert "aten::empty_strided" in page
    assert "http" not in page and page.count("<script") == page.count("<script>") == 1  # the zoom, inline: no src


@needs_foreign
def test_html_has_collectives() -> None:
    page = render_html(analyzed(NCCL))
    assert "<h2>Collectives</h2>" in page and "AllReduce x15" in page
    assert '<svg class="chart memory"' not in page  # no [memory] events in that trace


def test_two_ranks_sum_and_balance(tmp_path: Path) -> None:
    """Two ranks of one window: rows summed, the per-rank balance table in the HTML, each rank's own figures kept."""
    one = analyzed(h200("launch_bound_tiny_kernels"))
    both = analyze(_two_ranks(tmp_path, h200("launch_bound_tiny_kernels"), slow_copies=2.0), sidecars=False)
    want = truth.copy_figures(truth.events(h200("launch_bound_tiny_kernels")))
    rows = {(c["kind"], c["memory"]): c for c in both.measures.copies}
    for key, w in want.items():
        assert rows[key]["count"] == 2 * w["count"] and rows[key]["bytes"] == 2 * w["bytes"]
        assert rows[key]["total_ms"] == approx(3 * w["total_ms"])  # rank 1's copies took twice as long
        assert rows[key]["gbps"] == approx(2 * w["bytes"] / (3 * w["total_ms"]) / 1e6)
    assert [c["gbps"] for c in both.ranks[1].measures.copies] == approx([c["gbps"] / 2 for c in one.measures.copies])
    assert both.measures.launch is not None and one.measures.launch is not None
    assert both.measures.launch["small_kernels"] == 2 * one.measures.launch["small_kernels"]
    assert both.memory.peak == one.memory.peak
    assert [m["self_bytes"] for m in both.memory.by_op] == [2 * m["self_bytes"] for m in one.memory.by_op]
    page = render_html(both)
    assert "<h2>Balance across ranks</h2>" in page
    assert page.count("<polyline") == 2  # a memory line per rank


def test_diff_compares_bandwidth_latency_and_memory() -> None:
    base, new = analyzed(h200("sync_bound")), analyzed(h200("launch_bound_tiny_kernels"))
    d = compare(base, new)
    copies = {(c["kind"], c["memory"]): c for c in d.measures["copies"]}
    assert copies[("DtoD", "device")]["base"]["gbps"] == next(
        c["gbps"] for c in base.measures.copies if c["kind"] == "DtoD")
    assert copies[("DtoH", "pageable")]["base"] is None  # only the new side copies from pageable memory
    assert base.measures.launch is not None and new.measures.launch is not None
    a, b = base.measures.launch["p95_us"], new.measures.launch["p95_us"]
    assert d.measures["launch"]["p95_us"] == {"base": a, "new": b, "change": b - a}
    text = format_diff(d)
    assert "collectives, transfers and launch:" in text
    assert "DtoH pageable rate" in text and "absent" in text
    assert "launch p95" in text
    assert json.dumps(d.to_dict())
    page = render_diff_html(d)
    assert "<h2>Collectives, transfers and launch</h2>" in page and "DtoH pageable rate" in page


@needs_foreign
def test_diff_compares_collectives_per_step(tmp_path: Path) -> None:
    """One rank against the same trace as two ranks: twice the calls over twice the steps, the same time per step."""
    d = compare(analyzed(NCCL), analyze(_two_ranks(tmp_path, NCCL), sidecars=False))
    row = next(c for c in d.measures["communication"] if c["name"] == "AllReduce")
    want = truth.nccl_figures(raw(NCCL))["AllReduce"]
    steps = len({e["name"] for e in raw(NCCL) if str(e.get("name", "")).startswith("ProfilerStep#")})
    assert (row["base"]["count"], row["new"]["count"]) == (want["count"], 2 * want["count"])
    for side in ("base", "new"):
        assert row[side]["exposed_ms_per_step"] == approx(want["exposed_ms"] / steps)
        assert row[side]["total_ms_per_step"] == approx(want["total_ms"] / steps)
    assert "AllReduce (default_pg) busbw" in format_diff(d)


@needs_foreign
def test_window_scalars_carry_the_headline_figures() -> None:
    scalars = analyzed(NCCL).scalars()
    allreduce = next(c for c in analyzed(NCCL).measures.communication if c["name"] == "AllReduce")
    assert scalars["perf/window/comm_busbw_gbps"] == allreduce["busbw_gbps"]
    launch = truth.launch_figures(truth.events(NCCL))
    assert scalars["perf/window/launch_p95_us"] == approx(launch["p95_us"])


def test_window_scalars_carry_the_copy_rate() -> None:
    scalars = analyzed(h200("input_bound")).scalars()
    want = truth.copy_figures(truth.events(H200 / "input_bound.pt.trace.json.gz"))[("HtoD", "pageable")]
    assert scalars["perf/window/htod_gbps"] == approx(want["gbps"])
    assert "perf/window/comm_busbw_gbps" not in scalars  # no collective: left out, not 0

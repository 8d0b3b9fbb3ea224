"""Operators against the roofline: each GEMM group equals an independent count from the raw events (the four H200
fixtures), a real CPU trace with ``record_shapes=True`` equals FLOPs computed by hand, and the table is shown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from perf_callbacks.analysis import analyze, format_text, render_html
from tests.analysis.conftest import fixture_trace
from tests.analysis.roofline_truth import analyzed, gemm_groups

FIXTURES = ("compute_bound", "input_bound", "launch_bound_tiny_kernels", "sync_bound")
GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    return {name: analyzed(name) for name in FIXTURES}


@pytest.mark.parametrize("name", FIXTURES)
def test_every_gemm_group_equals_an_independent_count(results: dict, name: str) -> None:
    truth = gemm_groups(fixture_trace(name))
    rows = {(r["op"], r["shapes"], r["dtype"]): r for r in results[name].measures.roofline if r["op"] in GEMMS}
    assert truth and set(rows) == set(truth)
    for key, want in truth.items():
        got = rows[key]
        assert got["count"] == want["count"], key
        assert got["device_time_ms"] == pytest.approx(want["time_ms"], rel=0.01), key
        assert got["flops"] == pytest.approx(want["flops"], rel=0.01), key
        assert got["bytes"] == pytest.approx(want["bytes"], rel=0.01), key
        assert got["achieved_tflops"] == pytest.approx(want["tflops"], rel=0.01), key
        assert got["bound_share"] == pytest.approx(want["share"], rel=0.01), key


def test_a_call_that_launches_several_kernels_counts_once(results: dict) -> None:
    """cuDNN's attention backward launches 3 kernels per call: 18 calls (one per layer and step), FLOPs by hand
    (torch's formula: twice the forward's ``2 * batch * heads * L * S * (E + Ev)``)."""
    rows = [r for r in results["compute_bound"].measures.roofline if r["op"] == "aten::_cudnn_attention_backward"]
    (row,) = rows
    assert len(row["kernels"]) == 3
    assert row["count"] == 18 and row["flops"] == 18 * 2 * (2 * 32 * 16 * 1024 * 1024 * (128 + 128))
    assert row["kind"] == "attention" and row["dtype"] == "bf16"


def test_without_shapes_the_flops_come_from_the_runs_flop_counter(tmp_path: Path) -> None:
    """sync_bound with its shapes taken out and the run's per-operator FlopCounterMode count of one step written in
    (as our callbacks write it): each op's FLOPs are that count times the window's 3 steps; the bytes are unknown."""
    from tests.analysis.conftest import load_doc, save_doc

    doc = load_doc("sync_bound")
    for e in doc["traceEvents"]:
        for key in ("Input Dims", "Input type", "Input Strides", "Concrete Inputs"):
            e.get("args", {}).pop(key, None)
    per_step = {"aten::mm": 96 * 2**30, "aten::addmm": 48 * 2**30}
    doc["perf_callbacks_flops"] = {"flops_per_step": float(sum(per_step.values())), "source": "counted",
                                   "dtype": "fp32", "flops_by_op": per_step}
    result = analyze(save_doc(tmp_path / "rank0.pt.trace.json.gz", doc), sidecars=False)
    rows = {r["op"]: r for r in result.measures.roofline}
    assert len(result.ranks[0].steps) == 3
    for op, flops in per_step.items():
        assert rows[op]["shapes"] == "" and rows[op]["bytes"] is None and rows[op]["intensity"] is None
        assert rows[op]["flops"] == 3 * flops and rows[op]["dtype"] == "fp32"
        assert rows[op]["bound_tflops"] == 67.0 and rows[op]["bound"] is None  # the compute peak alone
    assert "[shapes not recorded]" in format_text(result)
    hint = result.measures.precision
    assert "FlopCounterMode" in hint["basis"] and "fp32 inputs" not in hint["text"]


def test_the_classes_follow_the_ridge_point(results: dict) -> None:
    """bf16 GEMMs of intensity 1560 FLOP/B are compute-bound on an H200 (ridge 989.4 / 4.8 = 206); tiny fp32 ones
    of intensity 3 memory-bound (ridge 67 / 4.8 = 14)."""
    big = [r for r in results["compute_bound"].measures.roofline if r["op"] == "aten::mm"]
    tiny = [r for r in results["launch_bound_tiny_kernels"].measures.roofline if r["op"] == "aten::mm"]
    assert big and all(r["bound"] == "compute" and r["peak_tflops"] == 989.4 for r in big)
    assert tiny and all(r["bound"] == "memory" and r["intensity"] < 67 / 4.8 for r in tiny)


def test_a_given_bandwidth_moves_the_bound(results: dict) -> None:
    """``--peak-tbps 0.05``: at 512 FLOP/B the sync_bound GEMMs' bound is 25.6 TFLOP/s, below the fp32 peak."""
    slow = analyze(fixture_trace("sync_bound"), sidecars=False, peak_tbps=0.05)
    truth = gemm_groups(fixture_trace("sync_bound"), bytes_per_s=0.05e12)
    for r in (r for r in slow.measures.roofline if r["op"] in GEMMS):
        assert r["bound"] == "memory" and r["bound_tflops"] == pytest.approx(r["intensity"] * 0.05)
        assert r["bound_share"] == pytest.approx(truth[(r["op"], r["shapes"], r["dtype"])]["share"], rel=0.01)
    assert slow.measures.roofline_peaks["tbps_source"] == "--peak-tbps 0.05"
    assert results["sync_bound"].measures.roofline_peaks["tbps"] == 4.8


def test_the_report_takes_peak_tbps(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from perf_callbacks.cli import main

    assert main(["report", str(fixture_trace("sync_bound")), "--no-sidecars", "--json", "--peak-tbps", "0.05"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["roofline_peaks"]["tbps"] == 0.05 and {r["bound"] for r in out["roofline"] if r["op"] in GEMMS} == {
        "memory"}


def test_the_report_shows_the_table_under_top(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "import sys; from perf_callbacks.cli import main; sys.exit(main())", "report",
           str(fixture_trace("sync_bound")), "--no-sidecars", "--top", "2", "--html", str(tmp_path / "r.html")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    table = out.split("operators against the roofline (top 2 by device time):\n")[1].splitlines()
    assert "TFLOP/s" in table[0] and "% of bound" in table[0]
    assert "aten::addmm [[4096], [2048, 4096], [4096, 4096]] fp32" in table[1]
    assert table[3].startswith("  peaks: ") and "4.8 TB/s (table: NVIDIA H200" in table[3]
    assert "<h2>Operators against the roofline</h2>" in (tmp_path / "r.html").read_text()


def test_the_documented_example_is_what_report_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/reference/roofline.md's roofline table and precision hint, re-run: each line, word for word."""
    from perf_callbacks.cli import main

    page = (Path(__file__).parents[3] / "docs" / "reference" / "roofline.md").read_text()
    sample = page.split("```\nprecision: fp32")[1].split("```")[0]
    assert main(["report", str(fixture_trace("sync_bound")), "--no-sidecars", "--top", "3"]) == 0
    printed = capsys.readouterr().out.splitlines()
    lines = [line for line in ("precision: fp32" + sample).splitlines() if line]
    assert len(lines) == 7 and all(line in printed for line in lines)


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=1, padding=1)
        self.fc1, self.fc2 = nn.Linear(8 * 6 * 6, 64), nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x).relu().flatten(1)
        y = self.fc2(self.fc1(h).relu())
        return torch.bmm(y.unsqueeze(2), y.unsqueeze(1)).sum(dim=(1, 2))


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cpu") / "rank0.pt.trace.json"
    model, x = Small(), torch.randn(4, 3, 6, 6)
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                 record_shapes=True) as prof:
        for _ in range(3):
            model(x)
    prof.export_chrome_trace(str(path))
    return path


def test_a_cpu_trace_with_shapes_equals_flops_computed_by_hand(cpu_trace: Path) -> None:
    result = analyze(cpu_trace, sidecars=False)
    rows = {(r["op"], r["shapes"]): r for r in result.measures.roofline}
    fc1 = rows[("aten::addmm", "[64], [4, 288], [288, 64]")]
    fc2 = rows[("aten::addmm", "[10], [4, 64], [64, 10]")]
    bmm = rows[("aten::bmm", "[4, 10, 1], [4, 1, 10]")]
    assert (fc1["count"], fc2["count"], bmm["count"]) == (3, 3, 3)
    assert fc1["flops"] == 3 * 2 * 4 * 288 * 64 and fc1["bytes"] == 3 * 4 * (64 + 4 * 288 + 288 * 64 + 4 * 64)
    assert fc2["flops"] == 3 * 2 * 4 * 64 * 10
    assert bmm["flops"] == 3 * 2 * 4 * 10 * 1 * 10 and bmm["bytes"] == 3 * 4 * (40 + 40 + 400)
    (conv,) = [r for r in result.measures.roofline if r["kind"] == "conv"]
    assert conv["count"] == 3 and conv["flops"] == 3 * 2 * (4 * 8 * 6 * 6) * (3 * 3 * 3)
    rows = result.measures.roofline
    assert all(r["device"] == "cpu" and r["bound_share"] is None for r in rows)  # no CPU peaks known
    assert not any(r["op"] == "aten::linear" for r in result.measures.roofline)  # a wrapper of addmm: not counted twice
    assert not any(r["op"] == "aten::copy_" for r in result.measures.roofline)  # addmm's bias copy is addmm's own work
    assert fc1["achieved_tflops"] == pytest.approx(fc1["flops"] / (fc1["device_time_ms"] / 1e3) / 1e12)


def test_nothing_about_precision_on_a_cpu_trace(cpu_trace: Path) -> None:
    result = analyze(cpu_trace, sidecars=False)
    assert result.measures.precision is None and result.to_dict()["precision"] is None
    assert "precision" not in format_text(result).lower()
    assert "Precision" not in render_html(result)


def test_ops_that_write_over_a_tensor_do_not_read_it() -> None:
    """fill_/zero_ write n elements and read none; copy_ reads its source once and writes its destination once."""
    from perf_callbacks.analysis.compute.op_cost import op_cost

    n = 2048 * 4096
    assert op_cost("aten::fill_", [[2048, 4096], []], ["float", "Scalar"], []) == ("elementwise", n, 4 * n)
    assert op_cost("aten::zero_", [[2048, 4096]], ["float"], []) == ("elementwise", n, 4 * n)
    assert op_cost("aten::copy_", [[2048, 4096], [2048, 4096], []], ["c10::BFloat16", "float", "Scalar"], []) == (
        "elementwise", n, 4 * n + 2 * n)  # read fp32, write bf16
    assert op_cost("aten::add_", [[2048, 4096], [2048, 4096], []], ["float", "float", "Scalar"], []) == (
        "elementwise", n, 3 * 4 * n)  # in place: self is read as well as written


def test_no_op_is_above_the_bandwidth_bound_from_a_miscounted_write(results: dict) -> None:
    """compute_bound's fill_ read as 141% of the bandwidth bound when its overwritten tensor counted as read."""
    fills = [r for r in results["compute_bound"].measures.roofline if r["op"] in ("aten::fill_", "aten::zero_", "aten::copy_")]
    assert fills and all(r["bound_share"] is None or r["bound_share"] <= 1.0 for r in fills)


def test_a_share_above_the_bound_is_explained_where_the_table_is_shown(results: dict) -> None:
    """sync_bound's aten::pow reaches 101% of the bandwidth bound (2048x4096 fp32, 32 MB: it fits the H200's L2)."""
    pow_rows = [r for r in results["sync_bound"].measures.roofline if r["op"] == "aten::pow"]
    assert pow_rows and pow_rows[0]["bound_share"] > 1.0
    note = "aten::pow above 100% of the bandwidth bound: part of its bytes stayed in a cache"
    assert note in format_text(results["sync_bound"], top_k=20)
    assert note in render_html(results["sync_bound"])
    for quiet in ("input_bound", "compute_bound"):
        assert "above 100% of the" not in format_text(results[quiet], top_k=20)


def test_the_peaks_line_without_a_peak_flops_names_no_unit_for_it() -> None:
    from perf_callbacks.analysis.compute.roofline import roofline_lines

    row = {"device_time_ms": 1.0, "count": 1, "achieved_tflops": None, "achieved_tbps": None, "intensity": None,
           "bound_share": None, "bound": None, "op": "aten::mm", "shapes": "", "dtype": "fp32", "device": "cuda"}
    none = roofline_lines([row], {"tflops": {}, "tflops_source": None, "tbps": None}, 1)[-1]
    assert none == "  peaks: no peak FLOP/s known; no peak memory bandwidth known"
    known = roofline_lines([row], {"tflops": {"bf16": 989.0}, "tflops_source": "table: H100", "tbps": 3.35,
                                   "tbps_source": "table: H100"}, 1)[-1]
    assert known == "  peaks: bf16 989 TFLOP/s (table: H100); 3.35 TB/s (table: H100)"
    cpu = roofline_lines([{**row, "device": "cpu"}], {"tflops": {"bf16": 989.0}, "tflops_source": "table: H100",
                                                      "tbps": 3.35, "tbps_source": "table: H100"}, 1)[-1]
    assert "H100" not in cpu and "no bound" in cpu  # CPU times are never held to the device's peaks


def test_fp32_calls_whose_kernels_use_tf32_are_held_to_the_tf32_peak() -> None:
    """An fp32 GEMM whose kernel is a TF32 tensor-core one (``tf32`` in its name) is held to the TF32 peak, 494.7
    TFLOP/s on an H200, not the fp32 one (67): 10 TFLOP in 0.1 s is 100 TFLOP/s, 20% of its bound, not 149%."""
    from perf_callbacks.analysis.compute.device_peaks import Peaks
    from perf_callbacks.analysis.compute.roofline import finish

    peaks = Peaks(tflops={"fp32": 67.0, "tf32": 494.7}, tbps=4.8)
    kernel = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off"
    row = {"op": "aten::mm", "shapes": "", "dtype": "fp32", "device_time_ms": 100.0, "flops": 10e12, "bytes": 1e9,
           "kernels": [{"name": kernel}]}
    tf32 = finish(dict(row), peaks)
    assert tf32["peak_dtype"] == "tf32" and tf32["peak_tflops"] == 494.7
    assert tf32["bound_share"] == pytest.approx(100.0 / 494.7)
    plain = finish({**row, "kernels": [{"name": "ampere_sgemm_128x64_tn"}]}, peaks)
    assert plain["peak_dtype"] == "fp32" and plain["peak_tflops"] == 67.0


def test_two_ranks_sum_their_calls_flops_and_bytes(tmp_path: Path, results: dict) -> None:
    """sync_bound as rank 0 and rank 1: every group of the window has twice one rank's calls, FLOPs and bytes."""
    folder = tmp_path / "window-000001-000005"
    folder.mkdir()
    for rank in (0, 1):
        (folder / f"rank{rank}.pt.trace.json.gz").write_bytes(fixture_trace("sync_bound").read_bytes())
    two = analyze(folder, top_k=1000, sidecars=False)
    assert len(two.ranks) == 2
    one = {(r["op"], r["shapes"], r["dtype"]): r for r in results["sync_bound"].measures.roofline}
    rows = {(r["op"], r["shapes"], r["dtype"]): r for r in two.measures.roofline}
    assert set(rows) == set(one)
    for key, r in rows.items():
        assert r["count"] == 2 * one[key]["count"], key
        assert r["flops"] == (None if one[key]["flops"] is None else 2 * one[key]["flops"]), key
        assert r["bytes"] == (None if one[key]["bytes"] is None else 2 * one[key]["bytes"]), key
    assert any(r["bytes"] for r in rows.values())

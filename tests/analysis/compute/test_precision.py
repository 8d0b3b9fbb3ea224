"""The precision hint: fp32 matrix products without tensor cores are named, with their share of device time and an
estimated gain that equals a count from the raw events; nothing is said where the math uses tensor cores already,
where it is too small to matter, or on CPU traces (``test_roofline.py``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, format_text, render_html
from tests.analysis.conftest import fixture_trace, load_doc, save_doc
from tests.analysis.roofline_truth import H200, H200_BYTES_PER_S, analyzed, gemm_groups

FP32 = ("cutlass_80_simt_sgemm", "sm80_xmma_gemm_f32f32_f32f32_f32")


def _kernels(path: Path) -> tuple[list[dict], float]:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    start = min(e["ts"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    kernels = [e for e in events if e.get("cat") == "kernel" and e["ts"] >= start]
    return kernels, sum(e["dur"] for e in kernels) / 1e3


def test_sync_bound_names_the_fp32_gemm_kernels_their_share_and_a_gain() -> None:
    result = analyzed("sync_bound")
    hint = result.measures.precision
    assert hint is not None
    kernels, busy_ms = _kernels(fixture_trace("sync_bound"))
    fp32_ms = sum(e["dur"] for e in kernels if any(k in e["name"] for k in FP32)) / 1e3
    assert {k for k in FP32 if any(k in n["name"] for n in hint["kernels"])} == set(FP32)
    assert hint["time_ms"] == pytest.approx(fp32_ms, rel=0.001)
    assert hint["device_share"] == pytest.approx(fp32_ms / busy_ms, rel=0.001)
    assert hint["device_share"] > 0.9  # fp32 GEMMs are nearly all of this window's device time

    # the gain at TF32: each GEMM group at its TF32 roofline bound, the rest at the ratio of the peaks
    groups = gemm_groups(fixture_trace("sync_bound"))
    saved = sum(g["time_ms"] - 1e3 * max(g["flops"] / H200["tf32"], g["bytes"] / H200_BYTES_PER_S)
                for g in groups.values())
    shaped = sum(g["time_ms"] for g in groups.values())
    saved += (fp32_ms - shaped) * (1 - H200["fp32"] / H200["tf32"])
    span_ms = result.ranks[0].span_ms
    assert hint["estimated_gain"]["tf32"]["window_ms"] == pytest.approx(saved, rel=0.01)
    assert hint["estimated_gain_fraction"] == pytest.approx(saved / span_ms, rel=0.01)
    assert hint["estimated_gain_ms"] == pytest.approx(saved / span_ms * result.step_time_ms, rel=0.01)
    assert 0 < hint["estimated_gain_ms"] < result.step_time_ms
    assert hint["estimated_gain"]["bf16"]["window_ms"] >= saved  # bf16 has the higher peak and half the bytes
    assert "estimate" in hint["basis"] and "upper bound" in hint["basis"]

    text = format_text(result)
    line = next(x for x in text.splitlines() if x.startswith("precision: "))
    assert "cutlass_80_simt_sgemm" in line and "sm80_xmma_gemm_f32f32_f32f32_f32" in line
    assert f"{hint['device_share']:.0%} of device time" in line and "ms per step" in line
    assert "set_float32_matmul_precision('high')" in line
    assert "<h2>Precision</h2>" in render_html(result)
    assert result.to_dict()["precision"]["estimated_gain_ms"] == hint["estimated_gain_ms"]


@pytest.mark.parametrize("name", ["compute_bound", "launch_bound_tiny_kernels", "input_bound"])
def test_nothing_is_said_where_precision_buys_little_or_nothing(name: str) -> None:
    """compute_bound's math is bf16 on tensor cores; the other two run fp32 GEMMs too small to matter (under 2% of
    the window)."""
    result = analyzed(name)
    assert result.measures.precision is None
    assert "precision" not in format_text(result).lower()


def test_tf32_kernels_are_not_named(tmp_path: Path) -> None:
    """The same trace with its GEMM kernels renamed to cuBLAS's TF32 tensor-core ones (whose names hold ``f32f32``
    too): nothing to say."""
    doc = load_doc("sync_bound")
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and any(k in e["name"] for k in FP32):
            e["name"] = "sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8"
    path = save_doc(tmp_path / "tf32.pt.trace.json.gz", doc)
    assert analyze(path, sidecars=False).measures.precision is None


def test_a_sidecar_gives_the_same_table_and_hint(tmp_path: Path) -> None:
    """The report from the sidecar written during training equals the report from parsing the trace."""
    import shutil

    from perf_callbacks.analysis.sidecar import write_sidecar

    trace = tmp_path / "rank0.pt.trace.json.gz"
    shutil.copy(fixture_trace("sync_bound"), trace)
    write_sidecar(trace)
    parsed, side = analyzed("sync_bound"), analyze(trace, sidecars=True)
    assert side.ranks[0].timeline is None  # read from the sidecar, not parsed
    assert json.dumps(side.measures.roofline) == json.dumps(parsed.measures.roofline)
    assert side.measures.precision["text"] == parsed.measures.precision["text"]


def test_the_live_settings_are_read_from_the_trace(tmp_path: Path) -> None:
    doc = load_doc("sync_bound")
    doc["perf_callbacks_device"] = {"float32_matmul_precision": "highest", "cuda_matmul_allow_tf32": False,
                                    "cudnn_allow_tf32": True, "mixed_precision": "", "peak_tbps": 4.0,
                                    "peak_tbps_source": "NVML: memory clock 2619 MHz x 6144-bit bus"}
    path = save_doc(tmp_path / "rank0.pt.trace.json.gz", doc)
    result = analyze(path, sidecars=False)
    assert result.measures.precision["settings"]["float32_matmul_precision"] == "highest"
    assert "torch.get_float32_matmul_precision() == 'highest'" in result.measures.precision["text"]
    peaks = result.measures.roofline_peaks
    assert peaks["tbps"] == 4.0 and peaks["tbps_source"].startswith("NVML")


def test_of_two_ranks_the_hint_is_the_one_with_fp32_math_and_names_it(tmp_path: Path) -> None:
    """Rank 0's GEMMs run on TF32 tensor cores (renamed), rank 1's in fp32 (sync_bound as it is): the window's hint is
    rank 1's, said to be rank 1's."""
    folder = tmp_path / "window-000001-000005"
    folder.mkdir()
    doc = load_doc("sync_bound")
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and any(k in e["name"] for k in FP32):
            e["name"] = "sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8"
    save_doc(folder / "rank0.pt.trace.json.gz", doc)
    (folder / "rank1.pt.trace.json.gz").write_bytes(fixture_trace("sync_bound").read_bytes())
    result = analyze(folder, sidecars=False)
    assert [r.rank for r in result.ranks] == [0, 1] and result.ranks[0].measures.precision is None
    hint = result.measures.precision
    assert hint is not None and hint["rank"] == 1 and hint["text"].startswith("rank 1: fp32 matrix math")
    assert hint["time_ms"] == pytest.approx(analyzed("sync_bound").measures.precision["time_ms"])


def test_the_bf16_estimate_halves_the_bytes_of_a_memory_bound_gemm() -> None:
    """An fp32 GEMM of 20 GB at 4.8 TB/s is memory-bound: at TF32 it still moves 20 GB (4.17 ms of its 10), in bf16
    half of them (2.08 ms)."""
    from perf_callbacks.analysis.compute.precision import estimate

    kernel = "cutlass_80_simt_sgemm_256x128_8x4_nt_align1"
    rows = [{"op": "aten::mm", "dtype": "fp32", "flops": 1e9, "bytes": 20e9, "device_time_ms": 10.0, "count": 1,
             "kernels": [{"name": kernel, "time_ms": 10.0}]}]
    peaks = {"tflops": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}, "tbps": 4.8, "tflops_source": "table: H200"}
    gains = estimate(rows, {kernel: 10.0}, 10.0, peaks, 100.0, 50.0)["estimated_gain"]
    assert gains["tf32"]["window_ms"] == pytest.approx(10.0 - 20e9 / 4.8e12 * 1e3)
    assert gains["bf16"]["window_ms"] == pytest.approx(10.0 - 10e9 / 4.8e12 * 1e3)
    assert gains["bf16"]["ms_per_step"] == pytest.approx(gains["bf16"]["window_ms"] / 100.0 * 50.0)

"""The overhead benchmark runs end to end in its quick form and writes its JSON; timings are reported, not asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_overhead_quick_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "overhead.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())

    stall = result["window_end_stall"]
    assert stall["ours_ms"] > 0 and stall["plain_stop_and_export_ms"] > 0 and stall["ratio"] > 0
    assert any(t["target"].startswith("window-end stall") for t in result["targets"])
    outside = result["outside_windows"]
    assert set(outside) >= {
        "none",
        "noop_hooks",
        "perf_callbacks",
        "perf_callbacks_capture",
        "perf_callbacks_every",
        "step_timer",
        "device_stats",
        "lightning_profiler",
        "torch_profiler",
    }
    assert outside["none"]["ratio_vs_none"] == pytest.approx(1.0)
    ours = outside["perf_callbacks"]
    assert ours["hook_us_per_step"] > 0
    assert outside["perf_callbacks_capture"]["hook_us_per_step"] > 0  # timed as ours is (capture_on_anomaly=True)
    assert outside["perf_callbacks_every"]["hook_us_per_step"] > 0  # and logging at every interval
    assert outside["step_timer"]["hook_us_per_step"] is not None  # the floor of a step timer, timed as ours is
    assert ours["memory_samples_per_run"] >= 1  # the default interval (50) falls inside the quick run
    assert result["inside_windows"]["steps_per_run"] >= 1
    assert result["traces"]["perf_callbacks"]["traces"] >= 1
    assert result["traces"]["perf_callbacks"]["raw_over_gz"] > 1
    assert {t["status"] for t in result["targets"]} <= {"PASS", "MISS", "n/a"}
    assert len(result["targets"]) == 6
    assert "status" in proc.stdout and "perf_callbacks" in proc.stdout


def test_memory_history_benchmark_needs_cuda_and_says_so(tmp_path: Path) -> None:
    """``benchmarks/memory_history.py`` measures on a GPU only; without one it exits 2 with the reason.

    ``CUDA_VISIBLE_DEVICES=""`` hides any GPU, so that this runs (and never skips) on a CUDA machine too.
    """
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "memory_history.py")], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2 and "needs a CUDA device" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.gpu
@pytest.mark.slow
def test_memory_history_benchmark_measures_on_cuda(tmp_path: Path) -> None:
    """On a CUDA device the benchmark runs (a short form: 2 rounds of 5 steps) and writes every figure."""
    out = tmp_path / "memory-history.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "memory_history.py"), "--rounds", "2", "--steps",
                           "5", "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["step_us_off"] > 0 and result["peak_read_us"] > 0 and result["snapshot_ms_100000"] > 0
    for n in (10_000, 100_000):
        assert result[f"memory_history_{n}"]["step_us"] > 0 and result[f"memory_history_{n}"]["ratio"] > 0


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium package")
def test_html_speed_runs_and_writes_json(tmp_path: Path) -> None:
    """``benchmarks/html_speed.py`` opens the pages in Chromium and reports their load time and size."""
    out = tmp_path / "html_speed.json"
    trace = REPO / "tests" / "data" / "gpu_traces" / "sync_bound.pt.trace.json.gz"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "html_speed.py"), str(trace), "--repeat", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    pages = json.loads(out.read_text())["pages"]
    assert [p["page"] for p in pages] == ["sync_bound.pt.trace.json.gz", "64 ranks, alternating strips"]
    assert all(p["load_ms_median"] > 0 for p in pages)
    assert pages[1]["bytes"] < 2_000_000  # the 64 ranks' strips are merged to about 6000 rectangles


def test_analysis_speed_prints_the_ratio_to_a_bare_load_and_says_what_it_did_not_measure(tmp_path: Path) -> None:
    """``benchmarks/analysis_speed.py`` times ``report --json`` against a bare load in one run; without an HTA or
    TraceLens interpreter it says so instead of a ratio."""
    out = tmp_path / "speed.json"
    trace = REPO / "tests" / "data" / "gpu_traces" / "sync_bound.pt.trace.json.gz"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "analysis_speed.py"), str(trace), "--repeat", "1",
                           "--out", str(out), "--hta-python", str(tmp_path / "missing-python")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "report / bare load = " in proc.stdout
    assert "HTA / report: not measured" in proc.stdout and "TraceLens / report: not measured" in proc.stdout
    rows = json.loads(out.read_text())["traces"][str(trace)]
    assert set(rows) == {"bare", "report"} and all(r["cpu_s"] > 0 for r in rows.values())

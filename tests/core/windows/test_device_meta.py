"""Each window's trace carries what the roofline and the precision hint need of the live run: the settings that let
fp32 matmuls use tensor cores, the mixed-precision dtype, and the peak memory bandwidth (given, or NVML's)."""

from __future__ import annotations

import builtins
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from perf_callbacks.analysis import analyze
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.windows import device_meta


def _window(tmp_path: Path, **options: Any) -> Path:
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 1, "wait": 0, "warmup": 1, "active": 2}, "summary": False,
                                **options})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", compute_dtype=torch.bfloat16))
    for step in range(5):
        engine.batch_start(step)
        torch.randn(16, 16) @ torch.randn(16, 16)
        engine.batch_end(stepped=True, samples=8)
    engine.close()
    (trace,) = engine.exported
    return trace


def test_the_trace_carries_the_live_settings_and_the_given_bandwidth(tmp_path: Path) -> None:
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        trace = _window(tmp_path, peak_tbps=3.35)
        tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)  # "high" sets the first
    finally:
        torch.set_float32_matmul_precision(before)
    meta = json.load(gzip.open(trace))[device_meta.META_KEY]
    assert meta == {"peak_tbps": 3.35, "peak_tbps_source": "peak_tbps: 3.35", "float32_matmul_precision": "high",
                    "cuda_matmul_allow_tf32": tf32[0], "cudnn_allow_tf32": tf32[1], "mixed_precision": "bf16"}
    assert analyze(trace, sidecars=False).measures.roofline_peaks["tbps"] == 3.35  # the report reads it back


def test_without_a_bandwidth_on_cpu_the_report_says_none_is_known(tmp_path: Path) -> None:
    trace = _window(tmp_path)
    assert json.load(gzip.open(trace))[device_meta.META_KEY]["peak_tbps"] is None
    peaks = analyze(trace, sidecars=False).measures.roofline_peaks
    assert peaks["tbps"] is None and "no peak memory bandwidth known" in peaks["tbps_source"]
    assert "set peak_tbps (or --peak-tbps)" in peaks["tbps_source"]


def test_nvml_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pynvml (the ``[nvml]`` extra) the bandwidth is None with the reason; nothing raises."""
    real_import = builtins.__import__

    def no_pynvml(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pynvml":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    device_meta.nvml_bandwidth.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    try:
        assert device_meta.nvml_bandwidth(0) == (None, "pynvml is not installed (pip install 'perf-callbacks[nvml]')")
    finally:
        device_meta.nvml_bandwidth.cache_clear()

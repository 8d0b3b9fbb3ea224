"""Module spans of traces other tools recorded: PyTorch's ``with_modules=True`` writes each module call as a
``python_function`` (or a ``user_annotation``) named ``nn.Module: <Class>_<n>``; they are read as module paths by
nesting, with the one module around all of them as the model (the root)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perf_callbacks.analysis import analyze, format_text
from perf_callbacks.analysis.compute.modules import OUTSIDE
from tests.analysis.compute.test_modules import op, rows_by_name, write_trace


def _launch(corr: int, at: float, start: float, dur: float) -> list[dict[str, Any]]:
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": at, "dur": 3,
             "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": 0, "tid": 7, "ts": start, "dur": dur,
             "args": {"device": 0, "correlation": corr}}]


def _events(cat: str) -> list[dict[str, Any]]:
    """A 1000 us step: ``Net_0`` holds ``Block_0`` (a 300 us kernel), ``Block_1`` holding ``Linear_0`` (200 us) and
    one 100 us kernel of its own; 50 us of kernels run outside every module (the optimizer)."""
    return [op("ProfilerStep#1", 0, 1000, cat="user_annotation"),
            op("nn.Module: Net_0", 10, 500, cat=cat), op("nn.Module: Block_0", 20, 100, cat=cat),
            op("nn.Module: Block_1", 200, 200, cat=cat), op("nn.Module: Linear_0", 210, 50, cat=cat),
            *_launch(1, 30, 40, 300), *_launch(2, 220, 400, 200), *_launch(3, 300, 650, 100),
            *_launch(4, 700, 800, 50)]


def test_nn_module_spans_of_a_foreign_trace_give_the_module_table(tmp_path: Path) -> None:
    for cat in ("python_function", "user_annotation"):
        result = analyze(write_trace(tmp_path / cat / "rank0.pt.trace.json", _events(cat)), sidecars=False)
        by = rows_by_name(result.modules)
        assert by["Block_0"]["time_us"] == 300 and by["Block_1"]["time_us"] == 300, cat  # Linear_0 is inside
        assert by[OUTSIDE]["time_us"] == 50
        assert "Block_1: 46% of device time" in format_text(result)

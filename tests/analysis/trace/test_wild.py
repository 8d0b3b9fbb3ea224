"""``report`` on traces nobody here wrote: backlog only from the delayed work's launch, time by cause without
ProfilerStep, PyTorch 1.8/1.9 ``Operator`` steps, the device span as the window of a trace without steps, device time
charged to the op that encloses its launch, torch.compile regions broken down into their kernels."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze, format_text
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult
from tests.analysis.conftest import device_busy, kernel, launch, write_trace, x
from tests.foreign import HTA as FOREIGN
from tests.foreign import needs_foreign

TORCH18 = Path(__file__).parents[2] / "data" / "torch18" / "worker0.pt.trace.json"


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    events: list[dict[str, Any]] = doc["traceEvents"]
    return events


def _line(text: str, prefix: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(prefix))


def test_backlog_starts_at_the_launch_of_the_delayed_work(tmp_path: Path) -> None:
    """20 s of CUDA initialisation on the host, then the first launch, whose kernel starts 4 ms later: 4 ms of
    backlog, and the 19.6 s before the launch are the host's (the device had nothing to run)."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 20_000_000), x("cpu_op", "aten::rand", 0, 19_600_000),
              launch(19_600_000, 1), kernel(19_604_000, 50, 1), launch(19_604_100, 2), kernel(19_604_110, 50, 2)]
    rank = analyze(write_trace(tmp_path / "init.json", events)).ranks[0]
    assert rank.backlog_fraction == pytest.approx(4000 / 20_000_000)
    assert rank.losses["host"] > 0.99


@needs_foreign
def test_foreign_backlog_is_measured_from_the_launch() -> None:
    """HTA's call_stack trace: its one kernel was launched 331 ms into the 413 ms step and started 64 ms later."""
    path = FOREIGN / "call_stack" / "backward_thread.json"
    events = _events(path)
    step = next(e for e in events if e["name"].startswith("ProfilerStep#"))
    gpu = next(e for e in events if e.get("cat") == "kernel")
    called = next(e for e in events if e.get("cat") == "cuda_runtime"
                  and e["args"].get("correlation") == gpu["args"]["correlation"])
    window, after = step["dur"], step["ts"] + step["dur"] - gpu["ts"] - gpu["dur"]
    result = analyze(path)
    assert result.ranks[0].backlog_fraction == pytest.approx((gpu["ts"] - called["ts"]) / window, rel=1e-6)
    assert result.ranks[0].losses["host"] == pytest.approx((called["ts"] - step["ts"] + after) / window, rel=1e-6)
    assert result.verdict == "host_bound"  # was compute_bound at 0.0% busy with 95.6% backlog
    simple = analyze(FOREIGN / "execution_trace" / "benchmark_simple_add_trace.json.gz")
    assert simple.ranks[0].backlog_fraction < 0.001  # was 99.4%: 19.6 s of CUDA initialisation
    assert simple.verdict != "compute_bound"
    assert simple.ranks[0].losses["host"] + simple.ranks[0].losses["sync"] > 0.99


def _no_steps(tmp_path: Path) -> Path:
    """No ProfilerStep: 995 ms of cuBLAS initialisation on the host, then three kernels, the last launched late."""
    events = [x("cpu_op", "aten::linear", 0, 995_000), launch(994_000, 1), kernel(995_000, 400, 1),
              launch(995_100, 2), kernel(995_400, 200, 2), launch(996_200, 3), kernel(996_300, 400, 3),
              x("cpu_op", "aten::sum", 996_300, 1_000)]
    return write_trace(tmp_path / "linear_kineto.json", events)


def test_a_trace_without_steps_is_measured_over_the_device_span(tmp_path: Path) -> None:
    result = analyze(_no_steps(tmp_path))
    rank = result.ranks[0]
    assert result.gpu_utilization == pytest.approx(1000 / 1700)  # 995.0-996.7 ms, not 0-997.3 ms
    assert rank.window_definition.startswith("first to last device op")
    assert (rank.prologue_ms, rank.epilogue_ms) == pytest.approx((995.0, 0.6))
    text = format_text(result)
    assert "host only, outside the window: 995.0 ms before the first device op" in text, text
    assert rank.losses["host"] == pytest.approx(700 / 1700)  # 995.6-996.3 ms: launched after the device went idle


def test_time_by_cause_is_printed_without_steps(tmp_path: Path) -> None:
    """The text's time-by-cause line holds the window's causes, whether the result has its timeline or not."""
    result = analyze(_no_steps(tmp_path))
    line = _line(format_text(result), "time by cause: ")
    assert line == "time by cause: compute 58.8%, host 41.2%", line
    rank = result.ranks[0]
    assert f"host {rank.losses['host']:.1%}" in line
    read_back = RankResult.from_dict(json.loads(json.dumps(rank.to_dict())))  # as from a sidecar: no timeline
    assert read_back.timeline is None
    again = AnalysisResult(**{**result.__dict__, "ranks": [read_back], "others": []})
    assert _line(format_text(again), "time by cause: ") == line


@needs_foreign
def test_foreign_traces_without_steps_print_their_causes() -> None:
    result = analyze(FOREIGN / "with_gpu_user_annotation" / "step_based_trace_2543932.json.gz")
    line = _line(format_text(result), "time by cause: ")
    assert f"host {result.ranks[0].losses['host']:.1%}" in line, line


def test_pytorch_1_8_operator_steps_and_loader_ranges() -> None:
    """PyTorch 1.8/1.9 write ``ProfilerStep#N`` and the DataLoader's ``__next__`` with category ``Operator``."""
    result = analyze(TORCH18)
    rank = result.ranks[0]
    assert [s.step for s in rank.steps] == [5, 6, 7]
    assert result.step_time_ms == pytest.approx(10.0)
    assert rank.window_definition.startswith("first ProfilerStep start")
    assert result.gpu_utilization == pytest.approx(device_busy(_events(TORCH18)))
    assert result.data_wait_fraction == pytest.approx(0.3)
    assert result.verdict == "input_bound"


def test_pytorch_1_8_steps_are_not_operators(tmp_path: Path) -> None:
    """On a CPU-only trace the top ops are operators: the steps and the DataLoader range are not among them."""
    cpu_only = [e for e in _events(TORCH18) if e.get("cat") == "Operator"]
    result = analyze(write_trace(tmp_path / "cpu.json", cpu_only))
    names = [op["name"] for op in result.top_ops]
    assert not any(n.startswith(("ProfilerStep#", "enumerate(DataLoader)")) for n in names), names
    assert result.step_time_ms == pytest.approx(10.0)


def test_device_time_goes_to_the_op_that_encloses_the_launch(tmp_path: Path) -> None:
    """An execution-trace replay renumbered the External ids: the convolution kernel's id names aten::result_type,
    which ran earlier; its correlation id leads to the launch inside aten::cudnn_convolution."""
    events = [
        x("cpu_op", "aten::result_type", 10, 5, **{"External id": 3}),
        x("cpu_op", "aten::conv2d", 100, 300, **{"External id": 10}),
        x("cpu_op", "aten::cudnn_convolution", 110, 280, **{"External id": 11}),
        {**launch(150, 500), "args": {"correlation": 500, "External id": 3}},
        {**kernel(400, 2000, 500, "implicit_convolve_sgemm"), "args": {"device": 0, "correlation": 500,
                                                                       "External id": 3}},
        x("cpu_op", "aten::add", 500, 50, **{"External id": 20}),
        {**launch(520, 501), "args": {"correlation": 501, "External id": 20}},
        {**kernel(2400, 100, 501, "add_kernel"), "args": {"device": 0, "correlation": 501, "External id": 20}},
        {**launch(530, 502), "args": {"correlation": 502, "External id": 502}},  # an id that names no op
        {**kernel(2500, 50, 502, "other_kernel"), "args": {"device": 0, "correlation": 502, "External id": 502}},
    ]
    ops = {op["name"]: op["self_time_us"] for op in analyze(write_trace(tmp_path / "replay.json", events)).top_ops}
    assert ops == {"aten::cudnn_convolution": 2000, "aten::add": 100, "other_kernel": 50}, ops


def test_a_compiled_region_is_broken_down_into_its_kernels(tmp_path: Path) -> None:
    """torch.compile: Triton kernels are launched straight from the region (no aten op between), a GEMM through
    aten::mm inside it. The region is a wrapper: its kernels are listed, the GEMM under aten::mm."""
    region = {"External id": 7}
    events = [
        x("cpu_op", "Torch-Compiled Region: 0/0", 0, 1000, **region),
        x("cpu_op", "## Call CompiledFxGraph fxkey ##", 5, 990, **{"External id": 8}),
        {**x("cuda_driver", "cuLaunchKernel", 10, 5), "args": {"correlation": 1, "External id": 8}},
        {**kernel(20, 300, 1, "triton_poi_fused_add_mul_0"), "args": {"device": 0, "correlation": 1,
                                                                     "External id": 8}},
        x("cpu_op", "aten::mm", 30, 40, **{"External id": 9}),
        {**launch(40, 2), "args": {"correlation": 2, "External id": 9}},
        {**kernel(320, 500, 2, "sm90_xmma_gemm"), "args": {"device": 0, "correlation": 2, "External id": 9}},
        {**x("cuda_driver", "cuLaunchKernel", 80, 5), "args": {"correlation": 3, "External id": 7}},
        {**kernel(820, 100, 3, "triton_per_fused_sum_1"), "args": {"device": 0, "correlation": 3, "External id": 7}},
    ]
    ops = {op["name"]: op["self_time_us"] for op in analyze(write_trace(tmp_path / "compiled.json", events)).top_ops}
    assert ops == {"aten::mm": 500, "triton_poi_fused_add_mul_0": 300, "triton_per_fused_sum_1": 100}, ops

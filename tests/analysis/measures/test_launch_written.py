"""Launch figures on written traces: a CUDA graph replay's kernels have no launch call of their own, 10 us is not
small, and several ranks give the median of their latencies."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.measures.launch import combine
from tests.analysis.conftest import kernel, launch, write_trace, x


def test_graph_replay_is_not_a_launch_and_ten_us_is_not_small(tmp_path: Path) -> None:
    """Two kernels launched one by one (5 us after their call returned; 9.9 us and 10.0 us long) and a graph replay
    of three kernels that start 50-90 us after its cudaGraphLaunch (30 us long) returned."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000),
              launch(10, 1), kernel(20, 9.9, 1), launch(40, 2), kernel(50, 10.0, 2),
              x("cuda_runtime", "cudaGraphLaunch", 100, 30.0, correlation=3)]
    events += [kernel(180 + 20 * i, 15.0, 3, name=f"graph_node_{i}") for i in range(3)]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    assert result.measures.launch is not None
    figures = result.measures.launch
    assert (figures["p50_us"], figures["p95_us"]) == (pytest.approx(5.0), pytest.approx(5.0))
    assert figures["launch_call_p50_us"] == pytest.approx(5.0)  # the graph launch's 30 us is not a launch call
    assert result.measures.launch["small_kernels"] == 1
    assert result.measures.launch["small_kernel_fraction"] == pytest.approx(9.9 / (9.9 + 10.0 + 45.0))


def test_ranks_give_the_median_of_their_latencies() -> None:
    ranks = [{"p50_us": p, "p95_us": 2 * p, "idle_p50_us": p / 2, "queued_fraction": p / 100,
              "launch_call_p50_us": p / 4, "small_kernels": 1, "small_kernel_fraction": 0.1} for p in (4.0, 8.0, 40.0)]
    got = combine(ranks)
    assert got is not None
    assert (got["p50_us"], got["p95_us"], got["idle_p50_us"]) == (8.0, 16.0, 4.0)
    assert (got["queued_fraction"], got["launch_call_p50_us"]) == (0.08, 2.0)
    assert (got["small_kernels"], got["small_kernel_fraction"]) == (3, pytest.approx(0.1))


def test_a_kernel_that_starts_before_its_launch_call_returns_waited_zero(tmp_path: Path) -> None:
    """HTA's ``triton_example``: one kernel starts 2.3 us before its 47.8 us ``cuLaunchKernel`` returns (p50 was
    -2.3 us). It waited nothing after the call: 0, and the others keep their delay."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000),
              x("cuda_driver", "cuLaunchKernel", 10, 47.8, correlation=1), kernel(55.5, 3.0, 1, "triton_add"),
              launch(100, 2), kernel(112, 3.0, 2), launch(200, 3), kernel(206, 3.0, 3)]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    assert result.measures.launch is not None
    figures = result.measures.launch
    assert (figures["p50_us"], figures["p95_us"], figures["idle_p50_us"]) == (1.0, 7.0, 1.0)
    one = write_trace(tmp_path / "alone.pt.trace.json", events[:3])
    alone = analyze(one, sidecars=False).measures.launch
    assert alone is not None and (alone["p50_us"], alone["p95_us"]) == (0.0, 0.0)

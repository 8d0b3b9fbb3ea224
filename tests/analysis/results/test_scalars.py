"""The window's TensorBoard scalars: all under ``perf/window/``, communication figures only for a distributed run."""

from __future__ import annotations

from typing import Any

from perf_callbacks.analysis.results.parts import Measures, MfuParts
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult


def rank(rank: int = 0, **fields: Any) -> RankResult:
    base: dict[str, Any] = {
        "rank": rank, "path": f"rank{rank}.pt.trace.json.gz", "span_ms": 100.0, "gpu_utilization": None,
        "kernel_busy_fraction": None, "step_time_ms": 10.0, "data_wait_fraction": 0.2,
        "losses": {"input": 0.2, "communication": 0.0}, "steps": [], "copies_ms": {}, "comm_ms": {}, "top_ops": [],
        "profiler_flags": [], "data_loader": None,
        "collectives_ms": [], "sync_calls_ms": {}, "launches_per_step": None,
    }
    return RankResult(**{**base, **fields})


def result(*ranks: RankResult, **fields: Any) -> AnalysisResult:
    return AnalysisResult("w", "input_bound", None, 0.2, 10.0, [], [], list(ranks), **fields)


BUSBW = [{"name": "allreduce", "group": "0", "count": 4, "bytes": 4e6, "total_ms": 2.0, "exposed_ms": 1.0,
          "algbw_gbps": 2.0, "busbw_gbps": 2.0, "group_size": 2, "busbw_p50_gbps": 2.0}]


def test_every_window_scalar_is_under_perf_window() -> None:
    scalars = result(rank(), efficiency=MfuParts(mfu=0.4, achieved_tflops=1.0)).scalars()
    assert scalars == {"perf/window/data_wait_fraction": 0.2, "perf/window/step_time_ms": 10.0,
                       "perf/window/mfu": 0.4, "perf/window/achieved_tflops": 1.0}


def test_a_single_process_window_logs_no_communication_figure() -> None:
    assert not any("comm" in k for k in result(rank(run_id="world_size=1,backend=gloo")).scalars())
    assert not any("comm" in k for k in result(rank(run_id="")).scalars())


def test_a_distributed_window_logs_its_communication_figures() -> None:
    several = result(rank(0), rank(1)).scalars()
    assert several["perf/window/communication_fraction"] == 0.0  # two ranks that never waited: 0, not left out
    traced_alone = result(rank(run_id="world_size=2,backend=gloo")).scalars()  # rank 0's trace of a 2-rank run
    assert traced_alone["perf/window/communication_fraction"] == 0.0
    collective = result(rank(collectives_ms=[1.0], losses={"input": 0.1, "communication": 0.3}),
                        measures=Measures(communication=BUSBW)).scalars()
    assert collective["perf/window/communication_fraction"] == 0.3
    assert collective["perf/window/comm_busbw_gbps"] == 2.0

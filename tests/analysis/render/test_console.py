"""The window's one console line, from the analysis' data: verdict, one number, the first advice in a few words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.render.console import MAX_CHARS, console_parts
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult
from perf_callbacks.core.windows.summary import window_line
from tests.analysis.conftest import fixture_trace
from tests.analysis.result_helpers import rank

SCENARIOS = {  # the H200 fixtures: verdict, the figure, the advice
    "compute_bound": ("compute_bound", "GPU busy 99%", "bf16/TF32, torch.compile, fused kernels"),
    "input_bound": ("input_bound", "data wait 99%", "try num_workers="),
    "launch_bound_tiny_kernels": ("host_bound", "device waiting on the host ", "torch.compile or CUDA graphs"),
    "sync_bound": ("sync_bound", "device idle after syncs 26%", "remove aten::item from the step"),
}


def line_of(parts: dict[str, str], first: int = 123456, last: int = 123458) -> str:
    return window_line(parts, {"window": [first, last], "partial": True}, Path("/runs/x/window-123456-123458"))


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_h200_window_gets_a_short_line_with_its_number_and_advice(name: str) -> None:
    verdict, figure, action = SCENARIOS[name]
    parts = console_parts(analyze(fixture_trace(name), sidecars=False))
    assert parts["verdict"] == verdict
    assert parts["figure"].startswith(figure) and parts["action"].startswith(action)
    head = line_of(parts).split(" -> ")[0]
    assert len(head) <= MAX_CHARS, head
    assert head.split(" ")[4].rstrip(":") == verdict  # the verdict first after the steps, no op name before it


@pytest.mark.parametrize(("fields", "verdict", "figure"), [
    ({"losses": {"input": 0.5}, "data_wait_fraction": 0.5, "machine": {"num_workers": 0, "cpu_cores": 8,
                                                                        "local_world_size": 1}},
     "input_bound", "data wait 50%"),
    ({"losses": {"host": 0.5}}, "host_bound", "device waiting on the host 50%"),
    ({"losses": {"sync": 0.5}, "sync_calls_ms": {"cudaStreamSynchronize_with_a_very_long_name" * 2: 3.0}},
     "sync_bound", "device idle after syncs 50%"),
    ({"losses": {"copy": 0.5}}, "copy_bound", "copies 50%"),
    ({"losses": {"communication": 0.5}}, "communication_bound", "exposed collectives 50%"),
    ({"losses": {"other": 0.5}}, "unexplained_idle", "unexplained device idle 50%"),
    ({"gpu_utilization": None}, "compute_bound", "host compute, no device traced"),
])
def test_every_verdict_has_its_number_and_a_short_advice(fields: dict[str, Any], verdict: str, figure: str) -> None:
    r = rank(**fields)
    assert r.verdict == verdict
    parts = console_parts_of(r)
    assert parts["figure"] == figure and parts["action"]
    if verdict != "sync_bound":  # an op name of the user's length is the only thing that can make a line long
        assert len(line_of(parts).split(" -> ")[0]) <= MAX_CHARS


def console_parts_of(r: RankResult) -> dict[str, str]:
    result = AnalysisResult(path=r.path, verdict=r.verdict, gpu_utilization=r.gpu_utilization,
                            data_wait_fraction=r.data_wait_fraction, step_time_ms=r.step_time_ms, top_ops=[],
                            recommendations=r.recommendations, ranks=[r])
    return console_parts(result)


def test_the_line_is_built_from_the_rank_the_window_was_judged_on_not_rank_0() -> None:
    """Rank 1 is sync_bound, rank 0 host_bound; the window is judged sync_bound: the line says rank 1's figures."""
    host = rank(rank=0, losses={"host": 0.3})
    sync = rank(rank=1, path="rank1.pt.trace.json.gz", losses={"sync": 0.45}, sync_calls_ms={"aten::item": 4.5})
    assert (host.verdict, sync.verdict) == ("host_bound", "sync_bound")
    result = AnalysisResult(path="w", verdict="sync_bound", gpu_utilization=0.5, data_wait_fraction=0.0,
                            step_time_ms=None, top_ops=[], recommendations=[], ranks=[host, sync])
    assert console_parts(result) == {"verdict": "sync_bound", "figure": "device idle after syncs 45%",
                                     "action": "remove aten::item from the step"}

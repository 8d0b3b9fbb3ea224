"""Collectives of an older torch: NCCL kernels without collective arguments, named and sized by the ``nccl:`` host
annotation that holds their launch (an all-to-all runs as a ``SendRecv`` kernel), equal to an independent count."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import AnalysisResult, analyze
from perf_callbacks.analysis.measures.comms import GATHER_UNSIZED
from tests.analysis import measure_truth as truth
from tests.analysis.conftest import kernel, launch, write_trace, x
from tests.foreign import HTA, needs_foreign

OLDER_TORCH = {  # HTA's traces of an older torch, and the device each was recorded on
    "negative_queue_length_values_check/rank0.json.gz": 0,
    "trace_diff/control/control.json.gz": 3,
    "trace_diff/test/test.json.gz": 1,
    "timeline_analysis/sampled_rank-0.json.gz": 0,
    "trace_filter/sampled_rank-1.json.gz": 1,
}
SEND_RECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"


@cache
def _analyzed(path: Path) -> AnalysisResult:
    return analyze(path, sidecars=False)


def _annotated(tmp_path: Path, **meta: Any) -> AnalysisResult:
    """Two steps of one all_to_all (1 Mi floats) and one _all_gather_base (1 Ki floats in), each a SendRecv kernel."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 10_000), x("user_annotation", "ProfilerStep#2", 10_000, 10_000)]
    for step in (0, 10_000):
        events += [
            x("user_annotation", "nccl:all_to_all", step + 100, 50, **{"Input Dims": [[1 << 20]],
                                                                       "Input type": ["float"]}),
            launch(step + 120, step + 1), kernel(step + 1_000, 1_000, step + 1, SEND_RECV),
            x("user_annotation", "nccl:_all_gather_base", step + 200, 50, **{"Input Dims": [[1024]],
                                                                             "Input type": ["float"]}),
            launch(step + 220, step + 2), kernel(step + 3_000, 500, step + 2, SEND_RECV),
        ]
    return analyze(write_trace(tmp_path / "rank0.pt.trace.json", events, **meta), sidecars=False)


def test_an_older_torch_collective_is_named_and_sized_by_its_annotation(tmp_path: Path) -> None:
    result = _annotated(tmp_path)
    rows = {c["name"]: c for c in result.measures.communication}
    assert set(rows) == {"AllToAll", "AllGather"}  # not SendRecv
    assert rows["AllToAll"]["bytes"] == 2 * 4 * (1 << 20)
    assert rows["AllToAll"]["algbw_gbps"] == pytest.approx(2 * 4 * (1 << 20) / 2_000 / 1e3)
    assert rows["AllGather"]["bytes"] is None  # its output is its input times a group size the trace does not give
    assert GATHER_UNSIZED in result.ranks[0].measures.notes


def test_an_annotated_all_gather_is_sized_by_its_output_when_the_group_is_known(tmp_path: Path) -> None:
    info = {"distributedInfo": {"rank": 0, "world_size": 4,
                                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4}]}}
    rows = {c["name"]: c for c in _annotated(tmp_path, **info).measures.communication}
    assert rows["AllGather"]["bytes"] == 2 * 4 * 1024 * 4
    assert rows["AllToAll"]["busbw_gbps"] == pytest.approx(rows["AllToAll"]["algbw_gbps"] * 3 / 4)


@needs_foreign
@pytest.mark.parametrize("name", sorted(OLDER_TORCH))
def test_older_torch_collectives_match_independent_count(name: str) -> None:
    path = HTA / name
    want = truth.annotated_nccl_figures(truth.events(path), OLDER_TORCH[name])
    rows = {c["name"]: c for c in _analyzed(path).measures.communication}
    assert set(rows) == set(want)
    assert "AllToAll" in rows
    for key, row in rows.items():
        assert (row["count"], row["bytes"]) == (want[key]["count"], want[key]["bytes"]), key
        assert row["total_ms"] == pytest.approx(want[key]["total_ms"], rel=0.01), key
        algbw = want[key]["algbw_gbps"]
        assert row["algbw_gbps"] == (None if algbw is None else pytest.approx(algbw, rel=0.01)), key


def _gathered(tmp_path: Path, out_elems: int) -> AnalysisResult:
    """HTA's older-torch traces: each ``nccl:_all_gather_base`` annotation (1 Ki floats in) runs inside the
    ``c10d::_allgather_base_`` op whose ``Input Dims`` give the output (``out_elems``) and the input tensor."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 10_000), x("user_annotation", "ProfilerStep#2", 10_000, 10_000)]
    for step in (0, 10_000):
        events += [
            x("cpu_op", "c10d::_allgather_base_", step + 190, 80, **{
                "Input Dims": [[out_elems], [1024], []], "Input type": ["float", "float", ""]}),
            x("user_annotation", "nccl:_all_gather_base", step + 200, 50, **{"Input Dims": [[1024]],
                                                                             "Input type": ["float"]}),
            launch(step + 220, step + 2), kernel(step + 3_000, 500, step + 2, SEND_RECV),
        ]
    return analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)


def test_an_annotated_all_gather_is_sized_by_the_allgather_base_op_around_it(tmp_path: Path) -> None:
    """The enclosing op's output is the size (nccl-tests: AllGather moves its output) and output / input is the
    group size (8 here; 8 and 64 in HTA's traces), so the bus factor 7/8 applies."""
    result = _gathered(tmp_path, 8 * 1024)
    (row,) = result.measures.communication
    assert (row["name"], row["count"], row["bytes"], row["group_size"]) == ("AllGather", 2, 2 * 4 * 8 * 1024, 8)
    assert row["algbw_gbps"] == pytest.approx(2 * 4 * 8 * 1024 / 1_000 / 1e3)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 7 / 8)
    assert GATHER_UNSIZED not in result.ranks[0].measures.notes


def test_an_allgather_base_op_whose_output_is_no_multiple_of_its_input_sizes_nothing(tmp_path: Path) -> None:
    result = _gathered(tmp_path, 8 * 1024 + 1)
    (row,) = result.measures.communication
    assert (row["bytes"], row["group_size"], row["busbw_gbps"]) == (None, None, None)
    assert GATHER_UNSIZED in result.ranks[0].measures.notes


def test_a_collective_launched_before_the_window_is_not_blamed_on_an_older_torch(tmp_path: Path) -> None:
    """``tl_mi300_resnet_ckpt``: a torch 2.x trace whose first AllReduce was launched before the trace began (its
    launch and its ``record_param_comms`` op are not in it) was "an older torch"; it says what happened instead."""
    comm = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
            "Group size": 2, "Process Group Name": "0", "Process Group Description": "default_pg"}
    name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    events = [x("user_annotation", "ProfilerStep#1", 0, 10_000),
              kernel(10, 500, 7, name),  # launched before the trace: correlation 7 has no launch call in it
              x("cpu_op", "record_param_comms", 1_000, 20, **{"External id": 9, **comm}),
              x("cuda_runtime", "hipLaunchKernel", 1_005, 5, correlation=8, **{"External id": 9}),
              x("kernel", name, 1_100, 500, device=0, stream=7, correlation=8, **{"External id": 9})]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    notes = " ".join(result.ranks[0].measures.notes)
    assert "older torch" not in notes and "before the window" in notes
    rows = {c["group"]: c for c in result.measures.communication}
    assert (rows[None]["count"], rows[None]["bytes"]) == (1, None)  # counted and timed
    assert rows["default_pg"]["bytes"] == 4 * 1024

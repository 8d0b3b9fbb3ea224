"""Collective figures on small written traces whose right answer is known by hand: 8 ranks (bus factors other than
1), ReduceScatter (sized by its input), a collective outside the window, ranks that differ, ``nccl:`` host spans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze
from tests.analysis.conftest import kernel, launch, write_trace, x

GROUP = 8
NELEMS = 1_000_000  # float32: 4 MB per call


def nccl(ts: float, dur: float, corr: int, collective: str, nelems_in: int, nelems_out: int) -> dict[str, Any]:
    """An NCCL kernel carrying its collective arguments, as torch 2.x writes them."""
    name = {"allreduce": "AllReduce", "reduce_scatter": "ReduceScatter"}[collective]
    return x("kernel", f"ncclDevKernel_{name}_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ts, dur, device=0,
             stream=20, correlation=corr, **{"Collective name": collective, "In msg nelems": nelems_in,
                                             "Out msg nelems": nelems_out, "dtype": "Float", "Group size": GROUP,
                                             "Process Group Name": "0", "Process Group Description": "default_pg"})


def rank_events(allreduce_us: list[float], exposed_gap_us: float = 0.0) -> list[dict[str, Any]]:
    """One 10 ms step: a 1 ms gemm, then AllReduces of 4 MB lasting ``allreduce_us`` each (the first overlapped by
    the gemm unless ``exposed_gap_us`` moves it past its end), one ReduceScatter of 32 MB in, 4 MB out (100 us), and
    one AllReduce that starts before the step (outside the window)."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 10_000), launch(1, 1), kernel(10, 1000, 1)]
    t = 500.0 + exposed_gap_us
    for i, dur in enumerate(allreduce_us):
        events += [launch(t - 10, 10 + i), nccl(t, dur, 10 + i, "allreduce", NELEMS, NELEMS)]
        t += dur + 1000
    events += [launch(t - 10, 50), nccl(t, 100, 50, "reduce_scatter", NELEMS * GROUP, NELEMS)]
    events += [launch(-2000, 60), nccl(-1990, 500, 60, "allreduce", NELEMS, NELEMS)]  # before the window
    return events


def rows(path: Path) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in analyze(path, sidecars=False).measures.communication}


def test_eight_ranks_reduce_scatter_by_input_and_per_call_busbw_with_the_bus_factor(tmp_path: Path) -> None:
    """ReduceScatter moves its input (32 MB in 100 us: 320 GB/s algbw, x 7/8 busbw); the per-call p50 busbw of
    AllReduce has the factor 2(n-1)/n = 1.75; the AllReduce before the step is not counted."""
    got = rows(write_trace(tmp_path / "rank0.pt.trace.json", rank_events([100.0, 200.0, 400.0])))
    rs = got["ReduceScatter"]
    assert (rs["count"], rs["bytes"], rs["group_size"]) == (1, 4 * NELEMS * GROUP, GROUP)
    assert rs["algbw_gbps"] == pytest.approx(320.0)
    assert rs["busbw_gbps"] == pytest.approx(320.0 * 7 / 8)
    assert rs["busbw_p50_gbps"] == pytest.approx(320.0 * 7 / 8)
    ar = got["AllReduce"]
    assert (ar["count"], ar["bytes"]) == (3, 3 * 4 * NELEMS)  # not the one before the step
    assert ar["total_ms"] == pytest.approx(0.7)
    assert ar["busbw_p50_gbps"] == pytest.approx(4e6 / 200 / 1e3 * 1.75)  # the middle call: 20 GB/s algbw
    assert ar["busbw_gbps"] == pytest.approx(12e6 / 700 / 1e3 * 1.75)


def test_ranks_that_differ_sum_their_total_and_exposed_time(tmp_path: Path) -> None:
    """Rank 0's AllReduces take 0.3 ms, the first one overlapped by the gemm; rank 1's take 0.9 ms, all exposed: the
    window's row sums both, for the total and the exposed time alike."""
    folder = tmp_path / "window-000001-000001"
    folder.mkdir()
    write_trace(folder / "rank0.pt.trace.json", rank_events([100.0, 200.0]))
    write_trace(folder / "rank1.pt.trace.json", rank_events([300.0, 600.0], exposed_gap_us=600.0))
    result = analyze(folder, sidecars=False)
    per_rank = [{c["name"]: c for c in r.measures.communication}["AllReduce"] for r in result.ranks]
    assert [r["total_ms"] for r in per_rank] == [pytest.approx(0.3), pytest.approx(0.9)]
    assert [r["exposed_ms"] for r in per_rank] == [pytest.approx(0.2), pytest.approx(0.9)]  # 100 us under the gemm
    summed = {c["name"]: c for c in result.measures.communication}["AllReduce"]
    assert summed["count"] == 4
    assert summed["total_ms"] == pytest.approx(1.2)
    assert summed["exposed_ms"] == pytest.approx(1.1)
    assert summed["busbw_gbps"] == pytest.approx(16e6 / 1200 / 1e3 * 1.75)


def test_nccl_host_spans_get_no_bandwidth_even_with_shapes(tmp_path: Path) -> None:
    """``nccl:`` spans on the host time the enqueue only: counted and timed, never sized, even with Input Dims."""
    span = x("user_annotation", "nccl:all_reduce", 100, 50, **{"Input Dims": [[NELEMS]], "Input type": ["float"]})
    gloo = {**span, "name": "gloo:all_reduce", "ts": 300}
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000), x("cpu_op", "aten::mm", 10, 80)]
    info = {"backend": "nccl", "rank": 0, "world_size": 2,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2}]}
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events + [span], distributedInfo=info),
                     sidecars=False)
    (row,) = result.measures.communication
    assert (row["name"], row["count"], row["total_ms"]) == ("AllReduce", 1, pytest.approx(0.05))
    assert (row["bytes"], row["algbw_gbps"], row["busbw_gbps"], row["busbw_p50_gbps"]) == (None, None, None, None)
    assert any("seen only on the host" in n for n in result.notes)
    # the same span from gloo is sized (the control: the shapes are read)
    (tmp_path / "g").mkdir()
    (sized,) = analyze(write_trace(tmp_path / "g" / "rank0.pt.trace.json", events + [gloo], distributedInfo=info),
                       sidecars=False).measures.communication
    assert sized["bytes"] == 4 * NELEMS

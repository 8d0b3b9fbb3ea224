"""MTIA's device events: DMA requests are copies and event records/waits are not kernels, so neither counts among the
small kernels of the launch figures; device utilization stays HTA's (which counts them busy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze, format_text
from tests.analysis import measure_truth as truth
from tests.analysis.conftest import write_trace, x
from tests.foreign import HTA, needs_foreign

MTIA = HTA / "mtia_trace_single_rank" / "mtia_rank_0.json.gz"


def _ccp(name: str, ts: float, dur: float) -> dict[str, Any]:
    return {**x("mtia_ccp_events", name, ts, dur), "pid": 0}


def test_mtia_dma_and_event_waits_are_not_small_kernels(tmp_path: Path) -> None:
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000), _ccp("fc-dtype_Float", 100, 300),
              _ccp("add-dtype_Float", 420, 5), *(_ccp("dma_request", ts, 5) for ts in (10, 20, 30)),
              _ccp("event_record", 40, 1), _ccp("event_wait", 500, 100)]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    assert result.measures.launch is not None
    assert result.measures.launch["small_kernels"] == 1  # add: not the three DMAs nor the event record
    assert result.measures.launch["small_kernel_fraction"] == pytest.approx(5 / 305)
    assert [(c["kind"], c["count"]) for c in result.measures.copies] == [("DMA", 3)]
    assert result.gpu_utilization == pytest.approx((300 + 5 + 15 + 1 + 100) / 1000)  # as HTA counts it
    causes = result.ranks[0].losses
    assert causes["sync"] == pytest.approx(101 / 1000)  # the record and the wait: the queue on an event, not compute
    assert result.ranks[0].copies_ms == pytest.approx({"DMA/device": 0.015})


@needs_foreign
def test_mtia_small_kernels_match_independent_count() -> None:
    """HTA's MTIA training trace: its 12194 "kernels under 10 us" were DMA requests and event records."""
    ev = truth.events(MTIA)
    lo, hi = truth.window(ev)
    device = [e for e in ev if e.get("cat") == "mtia_ccp_events" and truth.inside(e, lo, hi)]
    kernels = [e for e in device if not e["name"].startswith(("dma", "event_"))]
    result = analyze(MTIA, sidecars=False)
    assert result.measures.launch is not None
    assert result.measures.launch["small_kernels"] == sum(e["dur"] < 10 for e in kernels)
    dma = [e for e in device if e["name"].startswith("dma")]
    short = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD"}
    want: dict[str, list[int]] = {}
    for e in dma:  # direction and size from each request's own arguments
        row = want.setdefault(short[e["args"]["direction"]], [0, 0])
        row[0] += 1
        row[1] += e["args"]["size"]
    assert {c["kind"]: [c["count"], c["bytes"]] for c in result.measures.copies} == want
    assert result.ranks[0].launches_per_step == len(kernels)  # was 25812, with the DMAs and event records
    assert result.gpu_utilization == pytest.approx(0.578, abs=0.001)  # unchanged: HTA's 57.6% busy, as before
    assert result.verdict == "host_bound"
    assert "HtoD host x" in format_text(result) and "no byte count" not in format_text(result)


def _dma(ts: float, dur: float, direction: str, size: int) -> dict[str, Any]:
    return {**_ccp("dma_request", ts, dur), "args": {"stream": 105, "direction": direction, "size": size, "sqid": 8}}


def test_mtia_dma_requests_are_sized_and_directed_by_their_arguments(tmp_path: Path) -> None:
    """HTA's MTIA traces: each ``dma_request`` carries ``size`` and ``direction`` (was "DMA x877, no byte count")."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000), _ccp("fc-dtype_Float", 100, 300),
              _dma(10, 4, "HOST_TO_DEVICE", 4_000_000), _dma(20, 4, "HOST_TO_DEVICE", 4_000_000),
              _dma(500, 2, "DEVICE_TO_HOST", 1024), _ccp("dma_request", 600, 1)]  # the last one says nothing
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    rows = {(c["kind"], c["memory"]): c for c in result.measures.copies}
    assert set(rows) == {("HtoD", "host"), ("DtoH", "host"), ("DMA", "device")}
    assert (rows[("HtoD", "host")]["count"], rows[("HtoD", "host")]["bytes"]) == (2, 8_000_000)
    assert rows[("HtoD", "host")]["gbps"] == pytest.approx(8_000_000 / 8 / 1e3)
    assert rows[("DtoH", "host")]["bytes"] == 1024
    assert rows[("DMA", "device")]["bytes"] is None
    assert result.ranks[0].copies_ms == pytest.approx({"HtoD/host": 0.008, "DtoH/host": 0.002, "DMA/device": 0.001})


def test_an_mtia_event_wait_is_not_the_kernel_to_speed_up(tmp_path: Path) -> None:
    """``mtia_inference``: ``event_wait`` had the most self time (43%) and the compute-bound advice named it as the
    kernel to speed up; a wait is the queue waiting on an event: the advice names the leading kernel."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000), _ccp("event_wait", 0, 900),
              _ccp("merge", 10, 600), _ccp("pe_exe", 620, 300)]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    assert result.verdict == "compute_bound"
    advice = result.recommendations[0]
    assert "merge has" in advice and "event_wait" not in advice

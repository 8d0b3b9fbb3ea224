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
    assert [(c["kind"], c["count"]) for c in result.measures.copies] == [
        ("DMA", sum(e["name"].startswith("dma") for e in device))]
    assert result.ranks[0].launches_per_step == len(kernels)  # was 25812, with the DMAs and event records
    assert result.gpu_utilization == pytest.approx(0.578, abs=0.001)  # unchanged: HTA's 57.6% busy, as before
    assert result.verdict == "host_bound"
    assert "DMA x" in format_text(result)

"""Transfers by host memory kind: a copy to or from the host is pageable, pinned, or, where the trace does not say
(ROCm's ``Memcpy HtoD (Host -> Device)``), ``host``; never ``device``."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, format_text
from tests.analysis import measure_truth as truth
from tests.analysis.conftest import write_trace, x
from tests.foreign import HTA, needs_foreign

AMD = HTA / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def _copy(name: str, ts: float, dur: float, nbytes: int) -> dict[str, object]:
    return x("gpu_memcpy", name, ts, dur, device=0, stream=7, correlation=ts, bytes=nbytes)


def test_hip_host_copies_are_labelled_host(tmp_path: Path) -> None:
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000), _copy("Memcpy HtoD (Host -> Device)", 10, 100, 4 << 20),
              _copy("Memcpy DtoH (Device -> Host)", 200, 50, 1 << 20), _copy("Memcpy DtoD (Device -> Device)", 300,
                                                                              10, 1 << 20)]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    kinds = {(c["kind"], c["memory"]) for c in result.measures.copies}
    assert kinds == {("HtoD", "host"), ("DtoH", "host"), ("DtoD", "device")}
    assert set(result.ranks[0].copies_ms) == {"HtoD/host", "DtoH/host", "DtoD/device"}


@needs_foreign
def test_rocm_copies_match_independent_count() -> None:
    """HTA's MI250 trace: two ``hipMemcpyWithStream`` HtoD copies, which were labelled ``memory: device``."""
    result = analyze(AMD, sidecars=False)
    want = truth.copy_figures(truth.events(AMD))
    assert set(want) == {("HtoD", "host")}
    rows = {(c["kind"], c["memory"]): c for c in result.measures.copies}
    assert set(rows) == set(want)
    for key, row in rows.items():
        assert (row["count"], row["bytes"]) == (want[key]["count"], want[key]["bytes"])
        assert row["total_ms"] == pytest.approx(want[key]["total_ms"], rel=0.01)
    assert "HtoD host x2" in format_text(result)

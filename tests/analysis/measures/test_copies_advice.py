"""Pageable-copy advice on written traces: it needs slow copies that leave at least 5% of the window exposed (not
overlapped by compute); copies hidden under a kernel, or under 5% of the window, get none (never cry wolf)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.measures.copies import copy_advice
from tests.analysis.conftest import kernel, launch, write_trace, x

STEP_US = 100_000.0


def memcpy(ts: float, dur: float, corr: int, memory: str, nbytes: int) -> dict[str, Any]:
    return x("gpu_memcpy", f"Memcpy HtoD ({memory} -> Device)", ts, dur, device=0, stream=8, correlation=corr,
             bytes=nbytes)


def advice(tmp_path: Path, pageable_us: float, under_kernel: bool = False) -> list[str]:
    """One 100 ms step with a 25 GB/s pinned copy and one 1 GB/s pageable copy of ``pageable_us``, exposed unless a
    kernel runs over it."""
    events = [x("user_annotation", "ProfilerStep#1", 0, STEP_US), memcpy(100, 400, 1, "Pinned", 10_000_000),
              memcpy(10_000, pageable_us, 2, "Pageable", int(pageable_us * 1e3))]
    if under_kernel:
        events += [launch(9_000, 3), kernel(9_990, pageable_us + 20, 3)]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    rows = {(c["kind"], c["memory"]): c for c in result.measures.copies}
    assert rows[("HtoD", "pageable")]["gbps"] == pytest.approx(1.0)
    assert result.ranks[0].span_ms == pytest.approx(STEP_US / 1e3)
    return [text for _, _, text in copy_advice(result.ranks[0])]


@pytest.mark.parametrize(("pageable_us", "advised"), [(4_900.0, False), (5_000.0, True), (6_000.0, True)])
def test_pageable_advice_needs_five_percent_of_the_window_exposed(tmp_path: Path, pageable_us: float,
                                                                  advised: bool) -> None:
    found = advice(tmp_path, pageable_us)
    assert len(found) == int(advised)
    if advised:
        assert f"({pageable_us / STEP_US:.0%} of the window) did not overlap compute" in found[0]


def test_slow_pageable_copies_under_a_kernel_get_no_advice(tmp_path: Path) -> None:
    """20 ms of 1 GB/s pageable copies (20% of the window), all of it while a kernel runs: nothing to win."""
    assert advice(tmp_path, 20_000.0, under_kernel=True) == []
    assert len(advice(tmp_path, 20_000.0)) == 1  # the control: exposed, the same copies are advised on

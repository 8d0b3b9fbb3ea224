"""Collectives and host memory of real 2-rank gloo traces equal independent counts of their raw events (within 1%)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, format_text
from tests.analysis import measure_truth as truth
from tests.analysis.gloo_comm_traces import ACTIVE, PLAIN, SHAPED

pytestmark = pytest.mark.multiprocess
REL = 0.01


@pytest.fixture(scope="module")
def gloo_comm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.analysis.gloo_comm_traces import write_traces

    return write_traces(tmp_path_factory.mktemp("gloo_comm"))


def _window(root: Path, kind: str) -> Path:
    return next((root / kind).iterdir())


def test_gloo_collectives_with_shapes_match_independent_count(gloo_comm: Path) -> None:
    window = _window(gloo_comm, SHAPED)
    result = analyze(window, sidecars=False)
    for rank in result.ranks:
        want = truth.gloo_figures(truth.events(window / f"rank{rank.rank}.pt.trace.json"))
        rows = {c["name"]: c for c in rank.measures.communication}
        assert set(rows) == {"AllReduce", "Broadcast"}
        for name, row in rows.items():
            assert (row["group"], row["group_size"]) == ("default_pg", 2)
            assert (row["count"], row["bytes"]) == (want[name]["count"], want[name]["bytes"])
            for key in ("total_ms", "exposed_ms", "algbw_gbps", "busbw_gbps", "busbw_p50_gbps"):
                assert row[key] == pytest.approx(want[name][key], rel=REL), (rank.rank, name, key)
        assert rank.measures.overlap_fraction == pytest.approx(want["_overlap"]["fraction"], rel=REL, abs=1e-9)
    summed = {c["name"]: c for c in result.measures.communication}
    assert summed["AllReduce"]["count"] == sum(
        next(c["count"] for c in r.measures.communication if c["name"] == "AllReduce") for r in result.ranks)
    # the model's gradients, all-reduced every step on each of the two ranks, 4 bytes an element
    assert summed["AllReduce"]["bytes"] == 2 * ACTIVE * 4 * (256 * 256 + 256 + 64 * 256 + 64)
    assert summed["Broadcast"]["bytes"] == 2 * ACTIVE * 4 * 1000
    assert not [n for n in result.notes if "message size" in n]


def test_gloo_host_memory_by_op_matches_independent_count(gloo_comm: Path) -> None:
    window = _window(gloo_comm, SHAPED)
    result = analyze(window, sidecars=False)
    for rank in result.ranks:
        want = truth.memory_figures(truth.events(window / f"rank{rank.rank}.pt.trace.json"), device_type=0)
        assert rank.memory.peak is not None
        assert rank.memory.peak["memory"] == "host"
        assert (rank.memory.peak["bytes"], rank.memory.peak["op"]) == (want["peak"]["bytes"], want["peak"]["op"])
        assert rank.memory.peak["ts_ms"] == pytest.approx(want["peak"]["ts_ms"], rel=REL)
        for row in rank.memory.by_op:
            assert row["self_bytes"] == want["self_bytes"][row["name"]]
            assert row["calls"] == truth.op_calls(want, row["name"])  # an op's calls, else the events outside
    assert "host memory: peak" in format_text(result)


def test_gloo_without_shapes_degrades_to_counts_and_times(gloo_comm: Path) -> None:
    window = _window(gloo_comm, PLAIN)
    result = analyze(window, sidecars=False)
    for rank in result.ranks:
        want = truth.gloo_figures(truth.events(window / f"rank{rank.rank}.pt.trace.json"))
        for row in rank.measures.communication:
            assert row["count"] == want[row["name"]]["count"]
            assert row["total_ms"] == pytest.approx(want[row["name"]]["total_ms"], rel=REL)
            assert row["exposed_ms"] == pytest.approx(want[row["name"]]["exposed_ms"], rel=REL)
            assert (row["bytes"], row["algbw_gbps"], row["busbw_gbps"]) == (None, None, None)
    assert any("without a message size" in n for n in result.notes)
    text = format_text(result)
    assert "no message size in the trace" in text and "GB/s" not in text.split("collectives (")[1]
    assert result.memory.peak is None and "perf/window/comm_busbw_gbps" not in result.scalars()


def test_rank_0s_trace_alone_is_a_distributed_window_with_communication_figures(gloo_comm: Path) -> None:
    """The window summary reads rank 0's trace alone: its collectives say the run is distributed (single-process
    windows log no communication figure, tests/analysis/results/test_scalars.py)."""
    (rank0,) = [p for p in _window(gloo_comm, SHAPED).iterdir() if p.name.startswith("rank0")]
    scalars = analyze(rank0, sidecars=False).scalars()
    assert "perf/window/communication_fraction" in scalars and scalars["perf/window/comm_busbw_gbps"] > 0

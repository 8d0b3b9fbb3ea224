"""The four real H200 traces: verdicts and utilization against the fixtures README (union of intervals)."""

from __future__ import annotations

import pytest

from perf_callbacks.analysis import analyze, format_text
from tests.analysis.conftest import README_BUSY, fixture_trace

EXPECTED = {
    "compute_bound": "compute_bound",
    "input_bound": "input_bound",
    "launch_bound_tiny_kernels": "host_bound",
    "sync_bound": "sync_bound",
}


@pytest.fixture(scope="module")
def results():  # type: ignore[no-untyped-def]
    return {name: analyze(fixture_trace(name)) for name in EXPECTED}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_verdict(results, name: str) -> None:  # type: ignore[no-untyped-def]
    assert results[name].verdict == EXPECTED[name]
    assert results[name].ranks[0].verdict == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_utilization_matches_union_of_intervals(results, name: str) -> None:  # type: ignore[no-untyped-def]
    assert results[name].gpu_utilization == pytest.approx(README_BUSY[name], abs=0.01)


def test_input_bound_names_the_loader_and_num_workers(results) -> None:  # type: ignore[no-untyped-def]
    r = results["input_bound"]
    assert r.data_wait_fraction == pytest.approx(1674.5 / 1683.9, abs=0.01)
    assert "num_workers=0" in r.recommendations[0]
    assert "__next__" in r.recommendations[0]


def test_sync_bound_blames_item(results) -> None:  # type: ignore[no-untyped-def]
    rank = results["sync_bound"].ranks[0]
    assert rank.losses["sync"] == pytest.approx(43.1 / 158.5, abs=0.03)
    assert next(iter(rank.sync_calls_ms)) == "aten::item"


def test_launch_bound_is_host_not_sync(results) -> None:  # type: ignore[no-untyped-def]
    losses = results["launch_bound_tiny_kernels"].ranks[0].losses
    assert losses["host"] > 0.8 > 0.1 > losses["sync"]


def test_top_ops_leave_annotations_out(results) -> None:  # type: ignore[no-untyped-def]
    for r in results.values():
        names = {op["name"] for op in r.top_ops}
        assert not names & {"train_step", "ProfilerStep#4", "Optimizer.step#SGD.step"}
        assert all(0 <= op["fraction"] <= 1 and op["device"] == "cuda" for op in r.top_ops)
    assert results["launch_bound_tiny_kernels"].top_ops[0]["name"] == "aten::mm"


def test_profiler_overhead_is_reported(results) -> None:  # type: ignore[no-untyped-def]
    host = results["launch_bound_tiny_kernels"].recommendations
    assert "record_shapes=True" in host[1] and host[1].endswith("to confirm a host-bound verdict")
    # the compute-bound window had with_stack=True, but host overhead can only hide a compute-bound verdict: no
    # "profile again without it to confirm a host-bound verdict" (it was its second recommendation)
    assert not any("with_stack=True" in t for t in results["compute_bound"].recommendations)
    # only a host-bound verdict is to "confirm": the input-bound window's loading ran in the training process
    # (num_workers=0), the sync-bound window's relaunch after each sync is host time
    assert results["input_bound"].recommendations[1].endswith(
        "and with num_workers=0 the loading runs in this process, so the data wait is inflated with it; profile "
        "again without it to time the loading")
    sync = results["sync_bound"].recommendations  # the precision hint's larger gain ranks first, then the verdict's
    assert [r.cause for r in sync[:2]] == ["precision", "sync"]  # own advice and, right after it, its caveat
    assert "the sync time is inflated with it" in sync[2]
    assert not any("confirm a host-bound verdict" in t for name in ("input_bound", "sync_bound")
                   for t in results[name].recommendations)


def test_memory_and_steps(results) -> None:  # type: ignore[no-untyped-def]
    r = results["compute_bound"]
    assert r.memory.peak_bytes == 22567316480
    assert r.ranks[0].memory.device_bytes == 150109880320
    assert [s.step for s in r.ranks[0].steps] == [4, 5, 6]
    assert r.step_time_ms == pytest.approx(146.5, abs=1.0)


def test_scalars_and_text(results) -> None:  # type: ignore[no-untyped-def]
    r = results["sync_bound"]
    scalars = r.scalars()
    assert scalars["perf/window/gpu_utilization"] == pytest.approx(0.713, abs=0.01)
    assert scalars["perf/window/host_sync_fraction"] > 0.2
    text = format_text(r)
    assert "verdict: sync_bound" in text
    assert "aten::mm" in text

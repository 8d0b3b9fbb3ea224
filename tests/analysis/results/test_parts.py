"""The results' parts (memory, MFU, measures): the JSON stays flat, with the keys and order it had before them."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

import pytest

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.rank.sidecar_check import rank_from_sidecar
from perf_callbacks.analysis.results.parts import Measures, MemoryParts, MfuParts, flat, unflat
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult
from tests.analysis.conftest import fixture_trace

FIXTURES = ("compute_bound", "input_bound", "launch_bound_tiny_kernels", "sync_bound")

# The keys of ``report --json`` and of a sidecar's rank, in order, as written when every figure was a field.
WINDOW_JSON = [
    "path", "verdict", "gpu_utilization", "data_wait_fraction", "step_time_ms", "top_ops", "peak_memory_bytes",
    "recommendations", "stragglers", "imbalance_ratio", "step_time_spread_ms", "straggler_reasons", "windows",
    "verdict_margin", "runner_up", "verdict_note", "devices", "notes", "errors", "partial", "captures", "device",
    "flops_per_step", "achieved_tflops", "peak_tflops", "mfu", "mfu_gap", "flops_source", "peak_source",
    "communication", "overlap_fraction", "copies", "launch", "memory_by_op", "memory_peak", "memory_categories",
    "memory_at_peak", "memory_growth", "op_table", "loader", "hang", "roofline", "roofline_peaks", "precision",
    "modules", "culprit", "merged_trace", "ranks",
]
RANK_JSON = [
    "rank", "path", "span_ms", "gpu_utilization", "kernel_busy_fraction", "step_time_ms", "data_wait_fraction",
    "losses", "copies_ms", "comm_ms", "top_ops", "peak_memory_bytes", "device_memory_bytes", "profiler_flags",
    "data_loader", "collectives_ms", "sync_calls_ms", "launches_per_step", "verdict", "recommendations", "rank_source",
    "run_id", "start_us", "end_us", "device_kind", "window_definition", "backlog_fraction", "graph_idle_fraction",
    "copy_exposed_ms", "collectives_by_op_ms", "devices", "communication", "overlap_fraction", "copies", "launch",
    "memory_by_op", "memory_peak", "memory_curve", "memory_categories", "memory_at_peak", "memory_growth", "op_table",
    "measure_notes", "bad_events", "runtime_calls", "host_traced", "set_aside_ms", "flops", "collective_steps",
    "machine", "cuda_on_host", "prologue_ms", "epilogue_ms", "strip", "strip_names", "load", "loader", "roofline",
    "roofline_peaks", "precision", "modules", "arrivals", "steps",
]
# Per rank only: a window's JSON never had these keys.
RANK_ONLY = {"device_memory_bytes", "memory_curve", "measure_notes"}


@pytest.fixture(scope="module")
def results() -> dict[str, AnalysisResult]:
    return {name: analyze(fixture_trace(name), sidecars=False) for name in FIXTURES}


@pytest.mark.parametrize("name", FIXTURES)
def test_the_json_keeps_its_flat_keys_in_their_order(results: dict[str, AnalysisResult], name: str) -> None:
    data = results[name].to_dict()
    assert list(data) == WINDOW_JSON
    assert all(list(r) == RANK_JSON for r in data["ranks"])


@pytest.mark.parametrize("name", FIXTURES)
def test_each_part_lands_under_its_old_keys(results: dict[str, AnalysisResult], name: str) -> None:
    r = results[name]
    data = r.to_dict()
    for part in (r.memory, r.efficiency, r.measures):
        assert all(data[k] is v for k, v in flat(part).items() if k not in RANK_ONLY)
    rank = r.ranks[0]
    rank_data = rank.to_dict()
    for part in (rank.memory, rank.measures):
        assert all(rank_data[k] is v for k, v in flat(part).items())
    assert data["peak_memory_bytes"] == r.memory.peak_bytes and data["mfu"] == r.efficiency.mfu
    assert rank_data["device_memory_bytes"] == rank.memory.device_bytes is not None


@pytest.mark.parametrize("name", FIXTURES)
def test_a_rank_round_trips_through_its_json(results: dict[str, AnalysisResult], name: str) -> None:
    for rank in results[name].ranks:
        data = json.loads(json.dumps(rank.to_dict()))
        back = RankResult.from_dict(data)
        assert back.to_dict() == data
        assert back.memory == rank.memory and back.measures.op_table == rank.measures.op_table
        side = rank_from_sidecar({"rank": data})  # a sidecar's rank: checked key by key, then rebuilt
        assert side is not None and side.to_dict() == data


def test_a_sidecar_part_key_of_the_wrong_type_or_missing_is_refused(results: dict[str, AnalysisResult]) -> None:
    data = json.loads(json.dumps(results["sync_bound"].ranks[0].to_dict()))
    assert rank_from_sidecar({"rank": {**data, "peak_memory_bytes": "1 GB"}}) is None
    assert rank_from_sidecar({"rank": {**data, "memory_curve": [["a", 1]]}}) is None
    assert rank_from_sidecar({"rank": {k: v for k, v in data.items() if k != "device_memory_bytes"}}) is None
    # keys a sidecar of an older version lacks take their defaults, as before
    older = {k: v for k, v in data.items() if k not in ("memory_growth", "precision", "roofline")}
    rebuilt = rank_from_sidecar({"rank": older})
    assert rebuilt is not None and rebuilt.memory.growth is None and rebuilt.measures.roofline == []


def test_every_field_and_part_key_is_in_the_json() -> None:
    def keys(kind: Any, skip: set[str]) -> set[str]:
        return {f.name for f in fields(kind)} - skip

    part_keys = {k for kind in (MemoryParts, Measures) for k in flat(kind())}
    assert keys(RankResult, {"timeline", "memory", "measures"}) | part_keys == set(RANK_JSON)
    window_parts = {k for kind in (MemoryParts, MfuParts, Measures) for k in flat(kind())} - RANK_ONLY
    assert keys(AnalysisResult, {"others", "memory", "efficiency", "measures"}) | window_parts == set(WINDOW_JSON)


def test_unflat_takes_a_part_s_keys_and_leaves_the_others() -> None:
    part = unflat(MemoryParts, {"peak_memory_bytes": 5, "memory_curve": [[0.0, 1.0]], "verdict": "sync_bound"})
    assert part == MemoryParts(peak_bytes=5, curve=[[0.0, 1.0]])
    assert unflat(Measures, {"measure_notes": ["x"]}).notes == ["x"]

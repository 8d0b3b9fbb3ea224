"""Traces in the wild, built from this repo's real H200 fixtures: any file name, old category names, a list top
level, two devices in one file, duplicate ranks and two runs in one folder."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.trace.discover import discover
from tests.analysis.conftest import README_BUSY, device_busy, fixture_trace, load_doc, save_doc

SYNC_BUSY = README_BUSY["sync_bound"]


@pytest.fixture(scope="module")
def sync_doc() -> dict[str, Any]:
    return load_doc("sync_bound")


@pytest.mark.parametrize(
    "name",
    ["rank-0.json.gz", "worker0.1700000000.pt.trace.json", "myhost_4242.1700000000000.pt.trace.json.gz",
     "kineto_trace_3.json"],
)
def test_any_file_name_is_read_by_content(tmp_path: Path, sync_doc: dict[str, Any], name: str) -> None:
    save_doc(tmp_path / name, sync_doc)
    (tmp_path / "hparams.json").write_text('{"lr": 0.1}')
    result = analyze(tmp_path)
    assert result.gpu_utilization == pytest.approx(SYNC_BUSY, abs=0.001)
    assert result.verdict == "sync_bound"
    assert [Path(r.path).name for r in result.ranks] == [name]
    assert discover(tmp_path).skipped == [(tmp_path / "hparams.json", "a JSON object without traceEvents")]
    assert result.notes == ["not traces, left out: hparams.json (a JSON object without traceEvents)"]


def test_folder_without_a_trace_says_what_it_found(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(FileNotFoundError, match=r"1 \.json/\.json\.gz file\(s\) found, none is a trace: config\.json "
                                                r"\(a JSON object without traceEvents\)"):
        analyze(tmp_path)


def test_old_category_names_give_the_same_answer(tmp_path: Path, sync_doc: dict[str, Any]) -> None:
    """PyTorch 1.8-1.13 wrote Kernel, Memcpy, Memset, Operator, Runtime and Python function."""
    old = {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset", "cpu_op": "Operator",
           "cuda_runtime": "Runtime", "python_function": "Python function"}
    renamed = [{**e, "cat": old.get(e.get("cat"), e.get("cat"))} for e in sync_doc["traceEvents"]]
    assert {e["cat"] for e in renamed} & {"Kernel", "Operator", "Runtime"} == {"Kernel", "Operator", "Runtime"}
    result = analyze(save_doc(tmp_path / "old.json", {**sync_doc, "traceEvents": renamed}))
    original = analyze(fixture_trace("sync_bound"))
    assert result.verdict == original.verdict == "sync_bound"
    assert result.gpu_utilization == pytest.approx(SYNC_BUSY, abs=0.001)
    assert result.ranks[0].losses == pytest.approx(original.ranks[0].losses)
    assert result.top_ops[0]["name"] == original.top_ops[0]["name"] == "aten::mm"


def test_list_top_level(tmp_path: Path, sync_doc: dict[str, Any]) -> None:
    result = analyze(save_doc(tmp_path / "events.json", sync_doc["traceEvents"]))
    assert result.verdict == "sync_bound"
    assert result.gpu_utilization == pytest.approx(SYNC_BUSY, abs=0.001)


def test_two_devices_in_one_file(tmp_path: Path, sync_doc: dict[str, Any]) -> None:
    """Every third device op is copied onto device 1: each device gets its own utilization and kernel count."""
    events = list(sync_doc["traceEvents"])
    device_ops = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    copies = [{**e, "args": {**e["args"], "device": 1, "correlation": -5}} for e in device_ops[::3]]
    events += copies
    result = analyze(save_doc(tmp_path / "rank0.json", {**sync_doc, "traceEvents": events}))
    by_device = {d["device"]: d for d in result.devices}
    assert sorted(by_device) == [0, 1]
    assert by_device[0]["gpu_utilization"] == pytest.approx(device_busy(events, 0), abs=1e-6)
    assert by_device[1]["gpu_utilization"] == pytest.approx(device_busy(events, 1), abs=1e-6)
    assert by_device[1]["gpu_utilization"] < by_device[0]["gpu_utilization"] - 0.2
    alone = analyze(fixture_trace("sync_bound")).ranks[0]
    rank = result.ranks[0]
    assert rank.gpu_utilization == pytest.approx(SYNC_BUSY, abs=0.001)  # the primary device, not a mix
    assert rank.launches_per_step == alone.launches_per_step == by_device[0]["kernels_per_step"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    kernels_1 = sum(1 for e in copies if e["cat"] == "kernel" and lo <= e["ts"] <= hi)
    assert by_device[1]["kernels_per_step"] == pytest.approx(kernels_1 / len(steps))
    assert "rank 0 device 1: utilization" in _text(result)


def _text(result: Any) -> str:
    from perf_callbacks.analysis import format_text

    return format_text(result)


def test_duplicate_ranks_are_reported_and_kept_apart(tmp_path: Path, sync_doc: dict[str, Any]) -> None:
    doc = {**sync_doc, "distributedInfo": {"rank": 1, "world_size": 2, "backend": "nccl"}}
    save_doc(tmp_path / "a.json.gz", doc)
    save_doc(tmp_path / "b.json.gz", doc)
    result = analyze(tmp_path)
    assert [r.rank for r in result.ranks] == [1]
    assert result.imbalance_ratio is None
    assert any(n.startswith("2 files say rank 1 (a.json.gz, b.json.gz): kept apart") for n in result.notes)
    assert len(result.windows) == 2
    assert [w["ranks"] for w in result.windows] == [[1], [1]]


def test_two_runs_in_one_folder_are_not_compared(tmp_path: Path) -> None:
    """Two rank-0 files of runs 3 minutes apart (the fixtures were captured one after the other)."""
    shutil.copy(fixture_trace("compute_bound"), tmp_path / "rank0.pt.trace.json.gz")
    shutil.copy(fixture_trace("sync_bound"), tmp_path / "rank-0.json.gz")
    result = analyze(tmp_path)
    assert len(result.ranks) == 1
    assert result.imbalance_ratio is None and result.stragglers == []
    verdicts = sorted(w["verdict"] for w in result.windows)
    assert verdicts == ["compute_bound", "sync_bound"]
    assert result.verdict == "sync_bound"  # the later run
    assert any("separate" in n or "rank 0" in n for n in result.notes)


def test_two_jobs_with_different_distributed_info(tmp_path: Path, sync_doc: dict[str, Any]) -> None:
    save_doc(tmp_path / "rank0.json", {**sync_doc, "distributedInfo": {"rank": 0, "world_size": 2}})
    save_doc(tmp_path / "rank1.json", {**sync_doc, "distributedInfo": {"rank": 1, "world_size": 8}})
    result = analyze(tmp_path)
    assert len(result.windows) == 2
    assert len(result.ranks) == 1
    assert any(n.startswith("2 different jobs in one folder") for n in result.notes)


def test_rank_from_distributed_info_then_name_then_order(tmp_path: Path, sync_doc: dict[str, Any]) -> None:
    save_doc(tmp_path / "rank7.json", {**sync_doc, "distributedInfo": {"rank": 2, "world_size": 4}})
    save_doc(tmp_path / "rank3.json", sync_doc)
    save_doc(tmp_path / "trace.json", sync_doc)
    result = analyze(tmp_path)
    got = {Path(r.path).name: (r.rank, r.rank_source) for r in result.ranks}
    assert got == {"rank7.json": (2, "distributedInfo"), "rank3.json": (3, "file name"), "trace.json": (0, "order")}


def test_ranks_on_hosts_with_different_clock_bases_stay_one_job(tmp_path: Path, sync_doc: dict[str, Any]) -> None:
    """Kineto timestamps count from each host's baseTimeNanoseconds: 1000 s apart in ts, the same wall-clock time."""
    info = {"world_size": 2, "backend": "nccl"}
    save_doc(tmp_path / "rank0.json", {**sync_doc, "distributedInfo": {**info, "rank": 0}})
    moved = [{**e, "ts": e["ts"] - 1e9} if isinstance(e.get("ts"), (int, float)) else e
             for e in sync_doc["traceEvents"]]
    base = sync_doc["baseTimeNanoseconds"] + 10**12
    save_doc(tmp_path / "rank1.json", {**sync_doc, "traceEvents": moved, "baseTimeNanoseconds": base,
                                       "distributedInfo": {**info, "rank": 1}})
    result = analyze(tmp_path)
    assert [r.rank for r in result.ranks] == [0, 1] and result.notes == []
    save_doc(tmp_path / "rank1.json", {**sync_doc, "traceEvents": moved, "distributedInfo": {**info, "rank": 1}})
    assert len(analyze(tmp_path).windows) == 2  # without the base the ranges are 1000 s apart: separate runs

"""Interval arithmetic, the streamed reader, window discovery and gap causes on small synthetic traces."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.trace.discover import find_windows
from perf_callbacks.analysis.trace.events import load_rank
from perf_callbacks.analysis.trace.intervals import gaps, intersect, overlap, subtract, total, union
from perf_callbacks.analysis.trace.timeline import build_timeline
from tests.analysis.conftest import fixture_trace, kernel, launch, write_trace, x


def test_union_is_not_a_sum_of_durations() -> None:
    merged = union([(0, 10), (2, 5), (8, 12), (20, 21)])
    assert merged == [(0, 12), (20, 21)]
    assert total(merged) == 13
    assert subtract([(0, 10)], [(2, 3)]) == [(0, 2), (3, 10)]
    assert intersect([(0, 10)], [(5, 15)]) == [(5, 10)]
    assert overlap([(0, 10)], [(5, 15)]) == 5
    assert gaps([(2, 3)], 0, 5) == [(0, 2), (3, 5)]


def test_streamed_parse_equals_whole_parse(tmp_path: Path) -> None:
    """The chunked reader must see exactly the events of a plain json.load, on Kineto layout and on compact JSON."""
    src = fixture_trace("sync_bound")
    with gzip.open(src) as f:
        doc = json.loads(f.read())
    compact = tmp_path / "compact.pt.trace.json"
    compact.write_text(json.dumps(doc))
    streamed, whole = load_rank(src), load_rank(compact)
    assert streamed.events == whole.events == len(doc["traceEvents"])
    assert streamed.gpu == whole.gpu
    assert streamed.steps == whole.steps
    assert streamed.syncs == whole.syncs
    assert streamed.meta["deviceProperties"] == doc["deviceProperties"]
    assert "traceEvents" not in streamed.meta
    assert streamed.meta["traceName"] == doc["traceName"]


def test_windows_most_recent_first_and_rank_sources(tmp_path: Path) -> None:
    old, new = tmp_path / "run" / "window-000002-000004", tmp_path / "run" / "window-000012-000014"
    for i, w in enumerate((old, new)):
        w.mkdir(parents=True)
        events = [x("user_annotation", "ProfilerStep#2", 0, 100), x("cpu_op", "aten::mm", 10, 50)]
        write_trace(w / "rank0.pt.trace.json.gz", events)
        write_trace(w / "rank1.pt.trace.json", events, distributedInfo={"rank": 5, "world_size": 2})
        os.utime(w / "rank0.pt.trace.json.gz", (1000 + i, 1000 + i))
        os.utime(w / "rank1.pt.trace.json", (1000 + i, 1000 + i))
    (tmp_path / "run" / "notes.json").write_text("{}")
    assert [w.path for w in find_windows(tmp_path)] == [new, old]
    result = analyze(tmp_path)
    assert result.path == str(new)
    assert [r.rank for r in result.ranks] == [0, 5]
    assert [w["path"] for w in result.windows] == [str(new), str(old)]


def _gap_trace(tmp_path: Path, extra: list[dict]) -> Path:  # type: ignore[type-arg]
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000), launch(0, 1), kernel(10, 100, 1)]
    return write_trace(tmp_path / "t.pt.trace.json", events + extra)


def test_gap_after_blocking_call_is_sync(tmp_path: Path) -> None:
    extra = [x("cpu_op", "aten::item", 20, 95), launch(800, 2), kernel(810, 190, 2)]
    tl = build_timeline(load_rank(_gap_trace(tmp_path, extra)))
    assert tl is not None
    assert tl.totals()["sync"] == pytest.approx(700)
    assert tl.sync_calls["aten::item"] == pytest.approx(700)


def test_late_launch_is_host_and_early_launch_is_other(tmp_path: Path) -> None:
    extra = [launch(500, 2), kernel(510, 100, 2), launch(200, 3), kernel(900, 100, 3)]
    tl = build_timeline(load_rank(_gap_trace(tmp_path, extra)))
    assert tl is not None
    totals = tl.totals()
    assert totals["host"] == pytest.approx(410)  # 0..10 and 110..510: each kernel launched after the device idled
    assert totals["other"] == pytest.approx(290)  # 610..900: launched at 200, the device waited on something else
    assert totals["compute"] == pytest.approx(300)


def test_data_wait_and_communication_gaps(tmp_path: Path) -> None:
    extra = [
        x("user_annotation", "perf_callbacks.data_wait", 110, 300),
        x("user_annotation", "gloo:all_reduce", 410, 200),
        launch(0, 2),
        kernel(610, 390, 2),
    ]
    result = analyze(_gap_trace(tmp_path, extra))
    rank = result.ranks[0]
    assert rank.losses["input"] == pytest.approx(0.3)
    assert rank.losses["communication"] == pytest.approx(0.2)
    assert rank.data_wait_fraction == pytest.approx(0.3)
    # 0.3 ms of data wait in the one step is under the 1 ms floor of the live check: the next loss decides, and a note
    # says why the 30% is not the verdict (test_verdict.py has the same gaps at a millisecond scale: input_bound)
    assert result.verdict == "communication_bound"
    assert "data wait 30.0% of the window, but the median step waited 0.3 ms" in result.verdict_note


def test_memcpy_split_by_direction_and_memory(tmp_path: Path) -> None:
    copies = [
        x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 100, 300, device=0, correlation=5),
        x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 400, 50, device=0, correlation=6),
        x("gpu_memset", "Memset (Device)", 450, 10, device=0, correlation=7),
        launch(0, 9),
        kernel(460, 540, 9),
    ]
    result = analyze(_gap_trace(tmp_path, copies))
    rank = result.ranks[0]
    assert rank.copies_ms == pytest.approx({"HtoD/pageable": 0.3, "DtoH/pinned": 0.05, "memset": 0.01})
    assert rank.losses["copy"] == pytest.approx(0.35, abs=1e-6)  # 110..460 exposed; 100..110 overlaps the kernel
    assert result.verdict == "copy_bound"
    assert "pin_memory=True" in result.recommendations[0]


def test_missing_path_and_empty_trace(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        analyze(tmp_path / "nope")
    with pytest.raises(ValueError, match="no profiled events"):
        analyze(write_trace(tmp_path / "empty.pt.trace.json", []))

"""One timeline for several ranks: the merged file of a real 2-rank gloo window holds both ranks as processes, loads
with our own reader, is left out of a later report of the folder, and puts the clock of a rank on another host back
within 1 ms; ``--ranks`` picks the culprit, the median rank or numbers; ``report --merge-ranks`` writes it."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.trace.discover import MERGED_NAME
from perf_callbacks.analysis.trace.events import load_rank
from perf_callbacks.analysis.windows.merge import MERGED_FOLDER, merge_ranks, pick_ranks
from perf_callbacks.cli import EXIT_FAILED, EXIT_OK, main
from tests.analysis.synthetic_results import result as synthetic

pytestmark = pytest.mark.multiprocess
SHIFT_US = 37e3
"""Rank 1's wall clock on the 'other host': 37 ms ahead (beyond what NTP leaves)."""
META = ("process_name", "process_labels", "process_sort_index")
"""Process metadata: the merged file names each rank's process itself."""
BOOT_NS = 86_400 * 10**9
"""... and that host booted a day later: its ``ts`` (time since boot) and ``baseTimeNanoseconds`` differ by a day."""


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return list(doc["traceEvents"])


def _ends(events: list[dict[str, Any]], pid: Any = None) -> list[float]:
    return sorted(e["ts"] + e["dur"] for e in events
                  if e.get("name") == "gloo:all_reduce" and (pid is None or e.get("pid") == pid))


@pytest.fixture
def window(gloo_healthy_window: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(gloo_healthy_window, tmp_path / gloo_healthy_window.name))


def test_the_merged_file_holds_both_ranks_and_loads_with_our_reader(window: Path) -> None:
    merged = merge_ranks(analyze(window), "0,1")
    assert merged == window / MERGED_FOLDER / MERGED_NAME
    events = _events(merged)
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    assert all(type(e["pid"]) is int for e in events)  # one numbered process per rank
    for rank in (0, 1):
        source = [e for e in _events(window / f"rank{rank}.pt.trace.json") if e.get("name") not in META]
        mine = [e for e in events if e.get("pid") == rank and e.get("name") not in META]
        assert len(mine) == len(source) > 100
    trace = load_rank(merged)
    assert len(trace.comm_spans) == sum(len(load_rank(window / f"rank{r}.pt.trace.json").comm_spans) for r in (0, 1))
    assert len(analyze(window).ranks) == 2  # a later report of the folder does not take it for a third rank


def _hta_ranks(folder: Path) -> dict[int, list[str]]:
    """The files HTA's ``TraceAnalysis(trace_dir=folder)`` takes for each rank (hta.common.trace_file, 0.5.0): every
    ``.json``/``.gz`` file directly in the folder, ranked by its first ``"rank": N``, else rank 0."""
    found: dict[int, list[str]] = {}
    for path in sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".gz"))):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt") as f:
            match = re.search(r'"rank":\s+(\d+)', f.read())
        found.setdefault(int(match.group(1)) if match else 0, []).append(path.name)
    return found


def test_hta_reads_the_window_folder_as_its_ranks_and_the_merged_folder_as_one_trace(window: Path) -> None:
    """HTA takes every trace file of a folder as one rank: the merged file, written beside the per-rank files, took
    rank 0's place. It is written into its own folder, under the first chosen rank's ``distributedInfo``."""
    merged = merge_ranks(analyze(window), "1,0")
    assert _hta_ranks(window) == {0: ["rank0.pt.trace.json"], 1: ["rank1.pt.trace.json"]}
    assert _hta_ranks(merged.parent) == {1: [MERGED_NAME]}
    with gzip.open(merged, "rt") as f:
        info = json.load(f)["distributedInfo"]
    assert (info["rank"], info["world_size"], info["backend"]) == (1, 2, "gloo")
    trace = load_rank(merged)  # our reader: one trace, under that rank, with both ranks' collectives
    assert (trace.rank, trace.rank_source) == (1, "distributedInfo")
    assert len(trace.comm_spans) == sum(len(load_rank(window / f"rank{r}.pt.trace.json").comm_spans) for r in (0, 1))


def test_a_rank_on_another_host_is_put_back_on_one_clock_within_1_ms(window: Path) -> None:
    """Rank 1's file as if written on another host, booted a day later, whose wall clock reads 37 ms ahead: the merged
    file takes the offset off, so that each all-reduce's end differs between the ranks by what it did on the one true
    clock, within 1 ms."""
    truth = [b - a for a, b in zip(_ends(_events(window / "rank0.pt.trace.json")),
                                   _ends(_events(window / "rank1.pt.trace.json")), strict=True)]
    path = window / "rank1.pt.trace.json"
    doc = json.loads(path.read_text())
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += SHIFT_US - BOOT_NS / 1e3
    doc["host_name"], doc["baseTimeNanoseconds"] = "other-host", doc["baseTimeNanoseconds"] + BOOT_NS
    path.write_text(json.dumps(doc))
    events = _events(merge_ranks(analyze(window), "0,1"))
    gaps = [b - a for a, b in zip(_ends(events, 0), _ends(events, 1), strict=True)]
    assert len(gaps) == len(truth) >= 20
    assert all(abs(g - t) < 1e3 for g, t in zip(gaps, truth, strict=True)), (gaps, truth)
    assert abs(median(gaps)) < 1e3 + abs(median(truth))


def test_ranks_name_the_culprit_the_median_and_numbers() -> None:
    r = synthetic([[10.0] * 3, [30.0] * 3, [20.0] * 3, [12.0] * 3])
    assert pick_ranks(r, "slowest,median,0") == [1, 3, 0]
    r.culprit = {"rank": 2}
    assert pick_ranks(r, "slowest,2,3") == [2, 3]
    with pytest.raises(ValueError, match=r"'7' is neither slowest, median nor a rank of this window \(ranks: 0, 1"):
        pick_ranks(r, "0,7")


def test_report_merge_ranks_writes_the_file_and_names_it(window: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out, page = tmp_path / "both.json.gz", tmp_path / "page.html"
    assert main(["report", str(window), "--merge-ranks", str(out), "--ranks", "1", "--json", "--html",
                 str(page)]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["merged_trace"] == str(out.resolve())
    assert f"<code>{out.resolve()}</code>" in page.read_text()
    assert "culprit" in data
    assert {e["pid"] for e in _events(out)} == {1}
    assert main(["report", str(window), "--merge-ranks", str(out), "--ranks", "0,7"]) == EXIT_FAILED
    assert "'7' is neither slowest, median nor a rank of this window (ranks: 0, 1)" in capsys.readouterr().err
    assert main(["report", "s3://bucket/perf", "--merge-ranks"]) == EXIT_FAILED
    assert "--merge-ranks with a URL needs a FILE" in capsys.readouterr().err

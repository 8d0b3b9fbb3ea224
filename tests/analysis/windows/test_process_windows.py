"""Successive windows of one process in one folder (torch's ``tensorboard_trace_handler`` layout) are windows of one
rank, never ranks of one job; the ranks of one job stay ranks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze, format_text
from tests.analysis.conftest import load_doc, save_doc

GAP_US = 30_000.0  # torch's handler starts the next window ~30 ms after the previous one ends


@pytest.fixture(scope="module")
def sync_doc() -> dict[str, Any]:
    return load_doc("sync_bound")


def _later(doc: dict[str, Any], windows: int) -> dict[str, Any]:
    """The same window, ``windows`` windows later: steps renumbered past it, times after it."""
    events = [e for e in doc["traceEvents"] if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events) + GAP_US
    steps = [int(m.group(1)) for e in events if (m := re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name"))))]
    shift = (max(steps) - min(steps) + 2) * windows

    def moved(e: dict[str, Any]) -> dict[str, Any]:
        e = {**e, "ts": e["ts"] + span * windows}
        m = re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name")))
        return {**e, "name": f"ProfilerStep#{int(m.group(1)) + shift}"} if m else e

    return {**doc, "traceEvents": [moved(e) for e in events]}


def _write(folder: Path, docs: dict[str, dict[str, Any]]) -> Path:
    folder.mkdir(exist_ok=True)
    for name, doc in docs.items():
        save_doc(folder / name, {k: v for k, v in doc.items() if k != "distributedInfo"})
    return folder


@pytest.mark.parametrize("names", [("vm_24674.1796079506523065795.pt.trace.json",
                                    "vm_24674.1796079506551501954.pt.trace.json"),
                                   ("trace_a.json", "trace_b.json")])
def test_two_windows_of_one_process_are_windows_not_ranks(
    tmp_path: Path, sync_doc: dict[str, Any], names: tuple[str, str]
) -> None:
    folder = _write(tmp_path / "tb", {names[0]: sync_doc, names[1]: _later(sync_doc, 1)})
    result = analyze(folder)
    assert [r.rank for r in result.ranks] == [0] and result.path == str(folder / names[1])
    assert [(Path(w["path"]).name, w["ranks"]) for w in result.windows] == [(names[1], [0]), (names[0], [0])]
    assert result.stragglers == [] and not any(r.startswith("rank ") for r in result.recommendations)
    text = format_text(result)
    assert "rank 1" not in text and "imbalance" not in text
    assert any("2 successive profiling windows of one process" in n for n in result.notes)
    assert result.verdict == "sync_bound"


def test_two_processes_with_two_windows_each(tmp_path: Path, sync_doc: dict[str, Any]) -> None:
    later = _later(sync_doc, 1)
    folder = _write(tmp_path / "tb", {"vm_1.100.pt.trace.json": sync_doc, "vm_2.101.pt.trace.json": sync_doc,
                                      "vm_1.200.pt.trace.json": later, "vm_2.201.pt.trace.json": later})
    result = analyze(folder)
    assert [sorted(Path(f).name for f in w["files"]) for w in result.windows] == [
        ["vm_1.200.pt.trace.json", "vm_2.201.pt.trace.json"], ["vm_1.100.pt.trace.json", "vm_2.101.pt.trace.json"]]
    assert all(w["ranks"] == [0, 1] for w in result.windows)


def test_ranks_without_a_rank_that_run_the_same_steps_stay_ranks(tmp_path: Path, sync_doc: dict[str, Any]) -> None:
    folder = _write(tmp_path / "w", {"trace_a.json": sync_doc, "trace_b.json": sync_doc})
    result = analyze(folder)
    assert [r.rank for r in result.ranks] == [0, 1] and len(result.windows) == 1
    assert not any("successive" in n for n in result.notes)


@pytest.mark.multiprocess
def test_real_gloo_ranks_stay_ranks_without_distributed_info(tmp_path: Path, gloo_window: Path) -> None:
    import json

    docs = {f"trace_{f.name}": json.loads(f.read_text()) for f in sorted(gloo_window.glob("*.json"))}
    assert len(docs) == 2
    result = analyze(_write(tmp_path / "w", docs))
    assert [r.rank for r in result.ranks] == [0, 1] and len(result.windows) == 1

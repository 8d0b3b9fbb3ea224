"""Memory by op over several ranks: self bytes and calls summed over the ranks, the window's peak the highest rank's."""

from __future__ import annotations

from pathlib import Path

from perf_callbacks.analysis import analyze
from tests.analysis import measure_truth as truth
from tests.analysis.conftest import fixture_trace, load_doc, save_doc


def test_two_ranks_sum_calls_and_self_bytes_and_keep_the_higher_peak(tmp_path: Path) -> None:
    """sync_bound as rank 0 (with memory events outside any op), and as rank 1 with every allocation and free twice as large: rank 1 holds the peak."""
    folder = tmp_path / "window-000001-000005"
    folder.mkdir()
    (folder / "rank0.pt.trace.json.gz").write_bytes(fixture_trace("sync_bound").read_bytes())
    doc = load_doc("sync_bound")
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]":
            e["args"]["Bytes"] *= 2
            e["args"]["Total Allocated"] *= 2
    save_doc(folder / "rank1.pt.trace.json.gz", doc)
    memory = truth.memory_figures(truth.events(fixture_trace("sync_bound")))
    result = analyze(folder, top_k=1000, sidecars=False)  # every op, the events outside any op too
    assert result.memory.peak is not None
    assert (result.memory.peak["bytes"], result.memory.peak["op"]) == (2 * memory["peak"]["bytes"],
                                                                       memory["peak"]["op"])
    assert {r["name"] for r in result.memory.by_op} == set(memory["self_bytes"])
    assert memory["events"]["(outside any op)"] > 0
    for row in result.memory.by_op:
        assert row["self_bytes"] == 3 * memory["self_bytes"][row["name"]]
        assert row["calls"] == 2 * truth.op_calls(memory, row["name"])

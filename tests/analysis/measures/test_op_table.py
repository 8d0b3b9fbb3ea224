"""The op table behind ``report --sort``: self CPU time without the children's, sorted by the column asked for, and
more than the sidecars' 10 ops read from the traces themselves."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.sidecar import write_sidecar
from perf_callbacks.cli import main
from tests.analysis import measure_truth as truth
from tests.analysis.conftest import fixture_trace, write_trace, x


def self_cpu_us(events: list[dict[str, Any]]) -> dict[str, float]:
    """Each op's duration less its direct children's, summed by name (a stack per thread; no perf_callbacks)."""
    out: dict[str, float] = defaultdict(float)
    by_tid: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            by_tid[e.get("tid")].append(e)
    for ops in by_tid.values():
        stack: list[list[Any]] = []  # [end, name, self so far]
        for e in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1][0] <= e["ts"]:
                end, name, own = stack.pop()
                out[name] += own
            if stack:
                stack[-1][2] -= e["dur"]
            stack.append([e["ts"] + e["dur"], e["name"], e["dur"]])
        for _, name, own in stack:
            out[name] += own
    return dict(out)


def table(out: str, title: str) -> list[list[str]]:
    return [line.split() for line in out.split(f"top ops by {title}:\n")[1].split("\n\n")[0].splitlines()[1:]]


def test_self_cpu_time_leaves_the_children_out(tmp_path: Path) -> None:
    """An optimizer step of 100 us around a 30 us add_ and a 20 us mul_ (itself around a 5 us fill_)."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 200), x("cpu_op", "Optimizer.step", 10, 100),
              x("cpu_op", "aten::add_", 20, 30), x("cpu_op", "aten::mul_", 60, 20), x("cpu_op", "aten::fill_", 65, 5)]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    got = {r["name"]: r["self_cpu_us"] for r in result.measures.op_table}
    assert got == {"Optimizer.step": 50.0, "aten::add_": 30.0, "aten::mul_": 15.0, "aten::fill_": 5.0}
    assert got == self_cpu_us(events)


def test_sort_self_cpu_ranks_by_self_cpu_time_not_device_time(capsys: pytest.CaptureFixture[str]) -> None:
    """sync_bound: the .item() reads lead by self CPU time (81 ms waiting on the device), the matmuls by device time."""
    want = sorted(self_cpu_us(truth.events(fixture_trace("sync_bound"))).items(), key=lambda kv: -kv[1])[:5]
    assert main(["report", str(fixture_trace("sync_bound")), "--sort", "self_cpu", "--top", "5", "--no-sidecars"]) == 0
    rows = table(capsys.readouterr().out, "self CPU time")
    assert [r[-1] for r in rows] == [name for name, _ in want]
    assert [float(r[1]) for r in rows] == [pytest.approx(us / 1e3, abs=0.006) for _, us in want]


def test_top_over_ten_reads_the_trace_not_its_sidecar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sidecar keeps the top 10 ops of each column; ``--top 25`` by calls needs ops beyond them."""
    trace = tmp_path / "rank0.pt.trace.json.gz"
    trace.write_bytes(fixture_trace("launch_bound_tiny_kernels").read_bytes())
    write_sidecar(trace)
    calls: dict[str, int] = defaultdict(int)
    for e in truth.events(trace):
        if e.get("cat") == "cpu_op":
            calls[e["name"]] += 1
    want = sorted(calls.values(), reverse=True)[:25]
    assert len(want) == 25
    assert main(["report", str(trace), "--sort", "calls", "--top", "25"]) == 0
    assert [int(r[2]) for r in table(capsys.readouterr().out, "calls")] == want

"""Cutting a step that never completed out of a window's trace (``core/windows/trace_cut.py``), on a CUDA-shaped trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perf_callbacks.core.windows.trace_cut import cut_at_step, cut_events

HOST, DEVICE = 100, 0


def x(name: str, ts: float, dur: float, cat: str = "cpu_op", pid: int = HOST, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": 1, "ts": ts, "dur": dur, "args": args}


def trace() -> list[dict[str, Any]]:
    """Step 5 (0-100 us) launches k5 (runs late, 95-130 us) and k5b (on another stream, 140-150 us); step 6 (100-150
    us) launches k6 (130-160 us), and k6b at its very first microsecond (150-155 us), and holds host events of every
    phase: a user range (B/E), an instant (I) and a forward-backward flow (s/t/f). One event's time is a string."""
    return [
        {"ph": "M", "name": "process_name", "pid": HOST, "args": {"name": "python"}},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "ts": 0, "dur": 200},
        x("ProfilerStep#5", 0, 100, "user_annotation"),
        x("aten::mm", 10, 20),
        x("cudaLaunchKernel", 90, 3, "cuda_runtime", correlation=1),
        {"ph": "s", "cat": "ac2g", "id": 1, "pid": HOST, "tid": 1, "ts": 90},
        x("k5", 95, 35, "kernel", DEVICE, correlation=1),
        {"ph": "f", "cat": "ac2g", "id": 1, "pid": DEVICE, "tid": 7, "ts": 95, "bp": "e"},
        x("ProfilerStep#5", 95, 35, "gpu_user_annotation", DEVICE),
        x("cudaLaunchKernel", 92, 3, "cuda_runtime", correlation=3),
        {"ph": "s", "cat": "ac2g", "id": 3, "pid": HOST, "tid": 1, "ts": 92},
        {**x("k5b", 140, 10, "kernel", DEVICE, correlation=3), "tid": 8},
        {"ph": "f", "cat": "ac2g", "id": 3, "pid": DEVICE, "tid": 8, "ts": 140, "bp": "e"},
        x("ProfilerStep#6", 100, 50, "user_annotation"),
        x("cudaLaunchKernel", 100, 2, "cuda_runtime", correlation=4),
        {**x("k6b", 150, 5, "kernel", DEVICE, correlation=4), "tid": 8},
        {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 9, "pid": HOST, "tid": 1, "ts": 103},
        {"ph": "t", "cat": "fwdbwd", "name": "fwdbwd", "id": 9, "pid": HOST, "tid": 1, "ts": 104},
        {"ph": "B", "cat": "user_annotation", "name": "my range", "pid": HOST, "tid": 2, "ts": 110},
        {"ph": "I", "name": "mark", "pid": HOST, "tid": 2, "ts": 111, "s": "t"},
        {"ph": "E", "name": "my range", "pid": HOST, "tid": 2, "ts": 118},
        {"ph": "f", "cat": "fwdbwd", "name": "fwdbwd", "id": 9, "pid": HOST, "tid": 1, "ts": 125, "bp": "e"},
        {**x("ts as text", 0, 1), "ts": "120"},
        x("perf_callbacks.forward", 101, 20, "user_annotation"),
        x("aten::addmm", 102, 10),
        x("cudaLaunchKernel", 105, 3, "cuda_runtime", correlation=2),
        {"ph": "s", "cat": "ac2g", "id": 2, "pid": HOST, "tid": 1, "ts": 105},
        x("k6", 130, 30, "kernel", DEVICE, correlation=2),
        {"ph": "f", "cat": "ac2g", "id": 2, "pid": DEVICE, "tid": 7, "ts": 130, "bp": "e"},
        x("ProfilerStep#6", 130, 30, "gpu_user_annotation", DEVICE),
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": HOST, "tid": 1, "ts": 120, "s": "t"},
        {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 200, "s": "g"},
    ]


def names(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(str(e.get("cat")), e["name"]) if "name" in e else (e["cat"], f"flow {e['ph']}{e['id']}") for e in events]


def test_the_trace_ends_where_the_cut_step_began() -> None:
    kept = cut_events(trace(), 6)
    assert names(kept) == [
        ("None", "process_name"), ("Trace", "PyTorch Profiler (0)"),
        ("user_annotation", "ProfilerStep#5"), ("cpu_op", "aten::mm"), ("cuda_runtime", "cudaLaunchKernel"),
        ("ac2g", "flow s1"), ("kernel", "k5"), ("ac2g", "flow f1"), ("gpu_user_annotation", "ProfilerStep#5"),
        ("cuda_runtime", "cudaLaunchKernel"), ("ac2g", "flow s3"), ("kernel", "k5b"), ("ac2g", "flow f3"),
        ("cpu_op", "ts as text"), ("None", "Record Window End"),
    ]  # step 5's kernels and their flows stay although they ran after the cut: step 5 launched them. An event
    # without a numeric time is not judged: kept.


def test_a_trace_without_that_step_is_left_alone(tmp_path: Path) -> None:
    assert cut_events(trace(), 7) == trace()
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps({"traceEvents": trace(), "deviceProperties": [{"id": 0}]}))
    before = raw.read_bytes()
    cut_at_step(raw, 7)
    assert raw.read_bytes() == before
    cut_at_step(raw, 6)
    data = json.loads(raw.read_text())
    assert data["deviceProperties"] == [{"id": 0}] and data["traceEvents"] == cut_events(trace(), 6)


def test_a_trace_whose_clock_starts_at_zero() -> None:
    """Kineto's times have fractions of a microsecond: 0 is a time like any other, before a cut at 0.5 us."""
    step1 = [x("ProfilerStep#1", 0, 0.5, "user_annotation"), x("cudaLaunchKernel", 0, 0.2, "cuda_runtime", correlation=1)]
    kept = cut_events([*step1, x("k1", 0.8, 1, "kernel", DEVICE, correlation=1), x("ProfilerStep#2", 0.5, 1)], 2)
    assert names(kept) == [("user_annotation", "ProfilerStep#1"), ("cuda_runtime", "cudaLaunchKernel"),
                           ("kernel", "k1")]  # launched at 0, before the cut: stays
    # Cut at 0: its kernel ran at 0 too, and the step's annotation on the device (0.5 us) goes with it.
    assert cut_events([*step1, x("k1", 0, 0.3, "kernel", DEVICE, correlation=1),
                       x("ProfilerStep#1", 0.5, 1, "gpu_user_annotation", DEVICE)], 1) == []


def test_stray_entries_and_files_without_a_list_of_events_are_left_alone(tmp_path: Path) -> None:
    kept = cut_events([*trace(), None, "junk"], 6)  # an entry that is not an event is not judged
    assert kept == [*cut_events(trace(), 6), None, "junk"]
    for content in ([{"ph": "X", "name": "ProfilerStep#6", "pid": HOST, "ts": 0}], {"events": trace()},
                    {"traceEvents": {"0": trace()[2]}}):
        raw = tmp_path / "raw.json"
        raw.write_text(json.dumps(content))
        cut_at_step(raw, 6)
        assert json.loads(raw.read_text()) == content and [p.name for p in tmp_path.iterdir()] == ["raw.json"]

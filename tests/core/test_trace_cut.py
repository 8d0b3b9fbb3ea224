"""Cutting a step that never completed out of a window's trace (``core/trace_cut.py``), on a CUDA-shaped trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perf_callbacks.core.trace_cut import cut_at_step, cut_events

HOST, DEVICE = 100, 0


def x(name: str, ts: float, dur: float, cat: str = "cpu_op", pid: int = HOST, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": 1, "ts": ts, "dur": dur, "args": args}


def trace() -> list[dict[str, Any]]:
    """Step 5 (0-100 us) launches k5 (runs late, 95-130 us); step 6 (100-150 us) launches k6 (130-160 us)."""
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
        x("ProfilerStep#6", 100, 50, "user_annotation"),
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
        ("None", "Record Window End"),
    ]  # step 5's kernel stays although it ran after the cut: step 5 launched it


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

"""``analysis/trace/timeline.py`` on small hand-written traces: which ops count, on which device and thread, blocking calls
and the time set aside, exposed copies by kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis.trace.events import load_rank
from perf_callbacks.analysis.trace.schema import copy_kind
from perf_callbacks.analysis.trace.timeline import (
    WINDOW_DEFINITION,
    WINDOW_HOST_ONLY,
    WINDOW_NO_STEPS,
    Timeline,
    build_timeline,
    copy_spans,
    window,
    window_bounds,
)
from tests.analysis.conftest import kernel, launch, write_trace, x


def step(ts: float, dur: float, n: int = 1, tid: int = 1) -> dict[str, Any]:
    return {**x("user_annotation", f"ProfilerStep#{n}", ts, dur), "tid": tid}


def copy(ts: float, dur: float, corr: int, name: str = "Memcpy HtoD (Pageable -> Device)") -> dict[str, Any]:
    return x("gpu_memcpy", name, ts, dur, device=0, correlation=corr)


def timeline(tmp_path: Path, events: list[dict[str, Any]], device: int | None = None) -> Timeline:
    tl = build_timeline(load_rank(write_trace(tmp_path / "rank0.pt.trace.json", events)), device)
    assert tl is not None
    return tl


def test_busy_time_counts_the_chosen_devices_ops_inside_the_window(tmp_path: Path) -> None:
    events = [step(100, 900), kernel(0, 50, 1), launch(150, 2), kernel(200, 100, 2), launch(310, 3),
              kernel(400, 100, 3), launch(510, 4), {**kernel(600, 250, 4), "args": {"device": 1, "correlation": 4}}]
    tl = timeline(tmp_path, events)  # device 0: the most ops; its kernel at 0-50 ran before the window
    assert (tl.device, tl.busy_us) == (0, 200.0)
    on_1 = timeline(tmp_path, events, device=1)
    assert (on_1.device, on_1.busy_us) == (1, 250.0)


def test_on_cpu_only_traces_only_the_main_threads_ops_are_compute(tmp_path: Path) -> None:
    """A loader worker thread's ops (tid 2) run while the training thread idles: that idle is not compute."""
    events = [step(0, 1000, tid=1), {**x("cpu_op", "aten::mm", 100, 200), "tid": 1},
              {**x("cpu_op", "aten::stack", 400, 500), "tid": 2}]
    totals = timeline(tmp_path, events).totals()
    assert (totals["compute"], totals["other"]) == (200.0, 800.0)


def test_blocking_calls_add_up_their_idle_outside_the_time_set_aside(tmp_path: Path) -> None:
    """Two gaps of 100 us begun by cudaDeviceSynchronize; 20 us of the first is inside a validation span."""
    events = [step(0, 1000), launch(0, 1), kernel(10, 90, 1), x("cuda_runtime", "cudaDeviceSynchronize", 50, 100),
              x("user_annotation", "perf_callbacks.validation", 120, 20), launch(160, 2), kernel(200, 100, 2),
              x("cuda_runtime", "cudaDeviceSynchronize", 250, 100), launch(360, 3), kernel(400, 600, 3)]
    tl = timeline(tmp_path, events)
    assert tl.sync_calls == {"cudaDeviceSynchronize": 180.0}
    assert tl.totals()["sync"] == 180.0


def test_exposed_copy_time_is_kept_per_kind_only_when_there_is_some(tmp_path: Path) -> None:
    hidden = [step(0, 1000), launch(0, 1), kernel(0, 1000, 1), launch(1, 2), copy(100, 50, 2)]
    assert timeline(tmp_path, hidden).copy_exposed_us == {}
    half_us = [step(0, 1000), launch(0, 1), kernel(0, 500, 1), launch(1, 2), copy(499.5, 1, 2), launch(2, 3),
               kernel(500.5, 499.5, 3)]
    assert timeline(tmp_path, half_us).copy_exposed_us == {"HtoD/pageable": pytest.approx(0.5)}


def test_copy_kinds_and_spans() -> None:
    assert copy_kind("memcpy", "cudaMemcpyAsync") == "other/device"  # a name that is not Kineto's "Memcpy XtoY"
    assert copy_kind("memcpy", "Memcpy DtoH (Device -> Pinned)") == "DtoH/pinned"
    assert copy_kind("memset", "Memset (Device)") == "memset"
    ops = [(0.0, 10.0, "kernel", "gemm", 0, 1, -1), (5.0, 8.0, "memcpy", "Memcpy HtoD (Pinned -> Device)", 0, 2, -1),
           (7.0, 9.0, "memcpy", "Memcpy HtoD (Pinned -> Device)", 0, 3, -1), (20.0, 21.0, "memset", "Memset (Device)",
                                                                             0, 4, -1)]
    assert copy_spans(ops) == {"HtoD/pinned": [(5.0, 9.0)], "memset": [(20.0, 21.0)]}  # kernels are no copy


def test_a_trace_without_steps_is_measured_over_the_device_span_and_its_host_time_around_it(tmp_path: Path) -> None:
    """As HTA does: the window is the span the device was in use; traced host time before and after it is apart."""
    events = [x("cpu_op", "aten::empty", 0, 50), launch(90, 1), kernel(100, 100, 1), launch(250, 2),
              kernel(300, 100, 2), x("cpu_op", "aten::item", 450, 50)]
    trace = load_rank(write_trace(tmp_path / "rank0.pt.trace.json", events))
    assert window(trace) == (100, 400, WINDOW_NO_STEPS, 100, 100)
    assert window_bounds(trace) == (100, 400)
    tl = build_timeline(trace)
    assert tl is not None and (tl.definition, tl.prologue_us, tl.epilogue_us) == (WINDOW_NO_STEPS, 100, 100)
    inside = [launch(100, 1), kernel(100, 100, 1), x("cpu_op", "aten::add", 120, 20), launch(250, 2), kernel(300, 100, 2)]
    assert window(load_rank(write_trace(tmp_path / "inside.pt.trace.json", inside)))[3:] == (0.0, 0.0)


def test_a_trace_without_steps_or_device_is_measured_over_its_traced_ops(tmp_path: Path) -> None:
    trace = load_rank(write_trace(tmp_path / "rank0.pt.trace.json", [x("cpu_op", "aten::mm", 10, 40),
                                                                      x("cpu_op", "aten::add", 100, 200)]))
    assert window(trace) == (10, 300, WINDOW_HOST_ONLY, 0.0, 0.0)
    tl = build_timeline(trace)
    assert tl is not None and tl.totals()["compute"] == 240.0 and tl.totals()["other"] == 50.0
    assert window(load_rank(write_trace(tmp_path / "empty.pt.trace.json", []))) is None
    assert window_bounds(load_rank(write_trace(tmp_path / "empty.pt.trace.json", []))) is None


def test_with_steps_the_window_runs_to_the_last_device_op_and_has_no_prologue(tmp_path: Path) -> None:
    events = [x("cpu_op", "aten::empty", 0, 50), step(100, 300), launch(150, 1), kernel(350, 150, 1)]
    assert window(load_rank(write_trace(tmp_path / "rank0.pt.trace.json", events))) == (
        100, 500, WINDOW_DEFINITION, 0.0, 0.0)

"""Every idle moment explained or shown: backlog at the window's start, CUDA-graph replays, unexplained idle as a
verdict, copies by kind and collectives by name. Built by shifting kernels against their launches in real fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze, format_text
from perf_callbacks.analysis.trace.events import load_rank
from perf_callbacks.analysis.trace.timeline import build_timeline
from tests.analysis.conftest import kernel, launch, load_doc, save_doc, write_trace, x
from tests.foreign import HTA as FOREIGN
from tests.foreign import needs_foreign

DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def _steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])


def _uncovered(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    """Length of [a, b] that no span covers (plain loop, independent of the package's interval code)."""
    cur, free = a, 0.0
    for s, e in sorted(spans):
        if e <= cur or s >= b:
            continue
        free += max(0.0, s - cur)
        cur = max(cur, e)
    return free + max(0.0, b - cur)


def test_backlog_at_the_window_start_is_not_host_idle(tmp_path: Path) -> None:
    """Every device op runs 5 ms after the original: the device is still busy with earlier work when the window
    starts, so the first gap is backlog, not the host failing to launch."""
    doc = load_doc("sync_bound")
    shift = 5000.0
    events = [{**e, "ts": e["ts"] + shift} if e.get("cat") in DEVICE else e for e in doc["traceEvents"]]
    lo = _steps(events)[0]["ts"]
    first_op = min(e["ts"] for e in events if e.get("cat") in DEVICE)
    hi = max([s["ts"] + s["dur"] for s in _steps(events)] + [e["ts"] + e["dur"] for e in events
                                                                if e.get("cat") in DEVICE])
    result = analyze(save_doc(tmp_path / "rank0.json", {**doc, "traceEvents": events}))
    rank = result.ranks[0]
    assert rank.backlog_fraction == pytest.approx((first_op - lo) / (hi - lo), rel=1e-6)
    assert rank.losses["host"] < 0.05
    original = analyze(save_doc(tmp_path / "orig.json", doc)).ranks[0]
    assert rank.losses["host"] < original.losses["host"] + 0.01
    text = format_text(result)
    assert "backlog: " in text and "window: first ProfilerStep start" in text


def test_launch_to_start_delay_tells_backlog_from_host(tmp_path: Path) -> None:
    events = [x("user_annotation", "ProfilerStep#1", 0, 3000), launch(10, 1), kernel(2000, 500, 1),
              launch(2600, 2), kernel(2620, 380, 2)]
    tl = build_timeline(load_rank(write_trace(tmp_path / "late.json", events)))
    assert tl is not None
    assert tl.totals()["backlog"] == pytest.approx(1990)  # launched at 10, started 1990 us later: queue was full
    assert tl.totals()["host"] == pytest.approx(10 + 120)  # before the launch; 2500..2620: launched after idle
    events[2] = kernel(40, 500, 1)
    tl = build_timeline(load_rank(write_trace(tmp_path / "quick.json", events)))
    assert tl is not None
    assert tl.totals()["backlog"] == 0
    assert tl.totals()["host"] == pytest.approx(40 + 2080)


def _as_graph(events: list[dict[str, Any]], n: int, gap: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The first ``n`` device ops of step 5 become one CUDA graph replay, spread ``gap`` us apart."""
    step = _steps(events)[1]
    device = sorted((e for e in events if e.get("cat") in DEVICE), key=lambda e: e["ts"])
    runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
               and "correlation" in e.get("args", {})}
    start = next(i for i, e in enumerate(device) if e["ts"] >= step["ts"] and e["args"]["correlation"] in runtime)
    members = device[start : start + n]
    ids = {id(e) for e in members}
    last = members[-1]["ts"]
    corr = 10**9
    first_launch = runtime[members[0]["args"]["correlation"]]
    graph_launch = {**first_launch, "name": "cudaGraphLaunch", "args": {**first_launch["args"], "correlation": corr}}
    out, shifted = [graph_launch], []
    for e in events:
        if id(e) in ids:
            i = members.index(e)
            e = {**e, "ts": e["ts"] + i * gap, "args": {**e["args"], "correlation": corr}}
            shifted.append(e)
        elif e.get("cat") in DEVICE and e["ts"] > last:
            e = {**e, "ts": e["ts"] + (n - 1) * gap}
        out.append(e)
    return out, shifted


def test_cuda_graph_gaps_are_unexplained_idle_and_lead_the_verdict(tmp_path: Path) -> None:
    doc = load_doc("compute_bound")
    events, graph = _as_graph(doc["traceEvents"], n=20, gap=20000.0)
    device = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in DEVICE]
    inside = sum(_uncovered(a["ts"] + a["dur"], b["ts"], device) for a, b in zip(graph, graph[1:], strict=False))
    lo = _steps(events)[0]["ts"]
    hi = max([s["ts"] + s["dur"] for s in _steps(events)] + [b for _, b in device])
    result = analyze(save_doc(tmp_path / "rank0.json", {**doc, "traceEvents": events}))
    rank = result.ranks[0]
    assert inside > 0.3 * (hi - lo)
    assert rank.graph_idle_fraction == pytest.approx(inside / (hi - lo), rel=1e-3)
    assert rank.losses["other"] >= rank.graph_idle_fraction
    assert rank.losses["host"] < 0.02  # the replay was launched long before: not the host's fault
    assert result.verdict == "unexplained_idle"
    assert result.recommendations[0].startswith(f"unexplained idle {rank.losses['other']:.0%}: ")
    assert "inside CUDA graph replays" in result.recommendations[0]


def test_copies_get_advice_by_kind(tmp_path: Path) -> None:
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000), launch(0, 1), kernel(10, 100, 1),
              x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 110, 400, device=0, correlation=5),
              x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 510, 100, device=0, correlation=6),
              launch(600, 9), kernel(610, 390, 9)]
    result = analyze(write_trace(tmp_path / "t.json", events))
    rank = result.ranks[0]
    assert rank.copy_exposed_ms == pytest.approx({"DtoD/device": 0.4, "HtoD/pageable": 0.1})
    assert result.verdict == "copy_bound"
    first = result.recommendations[0]
    assert first.index("DtoD/device 0.4 ms: the data is already on the device") < first.index("HtoD/pageable 0.1 ms")
    assert "pin_memory=True" in first
    assert "keep the data on the device" not in first


def test_collectives_named_by_operation(tmp_path: Path) -> None:
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000),
              x("cpu_op", "record_param_comms", 5, 20, **{"External id": 7, "Collective name": "allreduce"}),
              x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1, **{"External id": 7}),
              kernel(20, 300, 1, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
              launch(400, 2), kernel(410, 200, 2, name="ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*)")]
    result = analyze(write_trace(tmp_path / "t.json", events))
    assert result.top_ops[0]["name"] == "record_param_comms (AllReduce)"
    assert result.ranks[0].collectives_by_op_ms == pytest.approx({"AllReduce": 0.3, "AllGather": 0.2})
    assert any(r.startswith("collectives (AllReduce 0.3 ms, AllGather 0.2 ms) were exposed")
               for r in result.recommendations)


@pytest.mark.slow  # a large trace: about 5 s
@needs_foreign
def test_foreign_cuda_graph_trace_names_the_unexplained_idle() -> None:
    result = analyze(FOREIGN / "negative_queue_length_values_check" / "rank0.json.gz")
    assert result.gpu_utilization == pytest.approx(0.355, abs=0.002)
    assert result.verdict == "unexplained_idle"
    assert result.recommendations[0].startswith("unexplained idle 5")
    assert result.ranks[0].graph_idle_fraction > 0.05


@pytest.mark.slow  # large traces: about 9 s
@needs_foreign
def test_foreign_device_to_device_copies_and_old_pytorch() -> None:
    diff = analyze(FOREIGN / "trace_diff" / "test" / "test.json.gz")
    assert diff.gpu_utilization == pytest.approx(0.963, abs=0.002)
    copy = next(r for r in diff.recommendations if r.startswith("copies"))
    assert "DtoD/device" in copy and "keep the data on the device" not in copy
    old = analyze(FOREIGN / "trace_file_list" / "inference_rank_1.json.gz")  # Kernel/Runtime categories
    assert old.gpu_utilization == pytest.approx(0.018, abs=0.002)
    mtia = analyze(FOREIGN / "mtia_inference_trace" / "mtia_inference_rank_0.json.gz")
    assert mtia.ranks[0].device_kind == "mtia"
    assert mtia.gpu_utilization == pytest.approx(0.957, abs=0.002)  # HTA's figure for this trace
    assert not any("bf16" in r or "TF32" in r for r in mtia.recommendations)
    amd = analyze(FOREIGN / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert amd.ranks[0].device_kind == "rocm" and amd.gpu_utilization == pytest.approx(0.016, abs=0.002)
    assert not any("CUDA graphs" in r or "bf16" in r for r in amd.recommendations)
    cupti = format_text(analyze(FOREIGN / "cupti_profiler" / "benchmark_result_924719_1679055439_trace.json.gz"))
    assert "no device activity recorded" in cupti and "CPU-only" not in cupti and "bf16" not in cupti


def _sglang_decode_shape(tmp_path: Path) -> Path:
    """TraceLens's ``tl_sglang_decode`` (ROCm), in small: the stream waits on an event (``hipStreamWaitEvent``), a
    kernel is queued behind it, and the host sits 463 ms in a synchronous ``hipMemcpyWithStream`` whose copy runs when
    the wait ends; the device idles all that time."""
    hip = [x("cuda_runtime", "hipStreamWaitEvent", 50, 5),
           x("cuda_runtime", "hipLaunchKernel", 80, 5, correlation=2),
           x("cuda_runtime", "hipMemcpyWithStream", 100, 463_050, correlation=3)]
    device = [x("gpu_memcpy", "Memcpy HtoD (Host -> Device)", 463_100, 40, device=0, stream=7, correlation=3),
              kernel(463_200, 6_800, 2, "decode_attention")]
    events = [x("user_annotation", "ProfilerStep#1", 0, 480_000), *hip, *device]
    return write_trace(tmp_path / "rank0.pt.trace.json", events)


def test_an_event_wait_held_by_a_blocking_call_is_sync_not_backlog(tmp_path: Path) -> None:
    """Backlog needs work queued and running: here nothing ran, the host sat in a blocking call the whole gap."""
    result = analyze(_sglang_decode_shape(tmp_path), sidecars=False)
    rank = result.ranks[0]
    assert rank.device_kind == "rocm"
    assert rank.backlog_fraction == 0.0  # was 96.4%, with the verdict compute_bound at 1.4% busy
    assert rank.losses["sync"] == pytest.approx((463_100 - 100) / 480_000)
    assert rank.sync_calls_ms == pytest.approx({"hipMemcpyWithStream": 463.0})
    assert result.verdict == "sync_bound"
    assert not any(r.startswith("backlog") for r in result.recommendations)


def test_a_gap_a_blocking_call_holds_all_but_its_first_moments_is_sync(tmp_path: Path) -> None:
    """``tl_sglang_decode`` as it is: the delayed kernel is launched at +0.043 ms, the host enters the blocking
    ``hipMemcpyWithStream`` only at +0.281 ms and sits there until +463.345 ms. The call holds all but 0.238 ms of the
    463 ms gap (``HELD_SHARE``): sync, not backlog (was compute_bound at 2.1% busy, backlog 97.8%)."""
    hip = [x("cuda_runtime", "hipLaunchKernel", 43, 5, correlation=2),
           x("cuda_runtime", "hipMemcpyWithStream", 281, 463_064, correlation=3)]
    device = [kernel(463_300, 9_000, 2, "decode_attention"),
              x("gpu_memcpy", "Memcpy HtoD (Host -> Device)", 472_300, 40, device=0, stream=7, correlation=3)]
    events = [x("user_annotation", "ProfilerStep#1", 0, 474_000), *hip, *device]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    rank = result.ranks[0]
    assert rank.backlog_fraction == 0.0
    assert rank.losses["sync"] == pytest.approx((463_300 - 43) / 474_000)
    assert rank.sync_calls_ms == pytest.approx({"hipMemcpyWithStream": 463.257})
    assert result.verdict == "sync_bound"


def test_a_blocking_call_that_holds_only_part_of_a_backlog_gap_leaves_it_backlog(tmp_path: Path) -> None:
    """The tolerance is a share of the gap: a blocking call entered 5% into the gap does not hold it."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 110_000),
              x("cuda_runtime", "cudaLaunchKernel", 43, 5, correlation=2),
              x("cuda_runtime", "cudaStreamSynchronize", 5_000, 95_000),
              kernel(100_000, 9_000, 2)]
    rank = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False).ranks[0]
    assert rank.backlog_fraction == pytest.approx((100_000 - 43) / 110_000)
    assert rank.sync_calls_ms == {}

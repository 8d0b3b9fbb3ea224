"""Collective and transfer bandwidth, launch latency and memory by operator equal independent counts of the raw events.

The counts come from ``measure_truth`` (a json.load and a loop, no perf_callbacks); every figure must agree within 1%.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from perf_callbacks.analysis import analyze, format_text
from perf_callbacks.analysis.rank.measures import window_advice
from perf_callbacks.analysis.sidecar import write_sidecar
from perf_callbacks.cli import main
from tests.analysis import measure_truth as truth
from tests.analysis.conftest import kernel, launch, save_doc, write_trace, x
from tests.analysis.measure_helpers import NCCL, REL, SCENARIOS, analyzed, approx, h200, raw
from tests.foreign import needs_foreign


@needs_foreign
def test_nccl_collectives_match_independent_count() -> None:
    result = analyzed(NCCL)
    expected = truth.nccl_figures(raw(NCCL))
    rows = {c["name"]: c for c in result.measures.communication}
    assert set(rows) == {"AllReduce", "Broadcast"}
    for name, row in rows.items():
        want = expected[name]
        assert row["group"] == "default_pg"
        assert (row["count"], row["bytes"], row["group_size"]) == (want["count"], want["bytes"], want["group_size"])
        for key in ("total_ms", "exposed_ms", "algbw_gbps", "busbw_gbps", "busbw_p50_gbps"):
            assert row[key] == approx(want[key]), (name, key)
    assert result.measures.overlap_fraction == approx(expected["_overlap"]["fraction"])
    assert result.scalars()["perf/window/comm_busbw_gbps"] == approx(expected["AllReduce"]["busbw_gbps"])


@needs_foreign
def test_nccl_busbw_factor_follows_nccl_tests(tmp_path: Path) -> None:
    """Eight ranks: AllReduce busbw = algbw x 2(n-1)/n = 1.75 x algbw; AllGather sized by its output, x (n-1)/n."""
    doc = json.loads(json.dumps(_doc(NCCL)))
    gathered = 0
    for e in doc["traceEvents"]:
        args = e.get("args", {})
        if "Group size" in args:
            args["Group size"] = 8
        if e.get("cat") == "kernel" and args.get("Collective name") == "broadcast":
            args["Collective name"] = "allgather"
            args["Out msg nelems"] = args["In msg nelems"] * 8
            gathered += 1
    path = save_doc(tmp_path / "rank0.pt.trace.json", doc)
    rows = {c["name"]: c for c in analyze(path, sidecars=False).measures.communication}
    expected = truth.nccl_figures(truth.events(path))
    assert rows["AllReduce"]["busbw_gbps"] == approx(rows["AllReduce"]["algbw_gbps"] * 1.75)
    assert rows["AllReduce"]["busbw_gbps"] == approx(expected["AllReduce"]["busbw_gbps"])
    assert rows["AllGather"]["count"] == gathered
    assert rows["AllGather"]["bytes"] == expected["AllGather"]["bytes"]
    assert rows["AllGather"]["busbw_gbps"] == approx(rows["AllGather"]["algbw_gbps"] * 7 / 8)


@needs_foreign
def test_group_of_one_moves_no_data(tmp_path: Path) -> None:
    doc = _doc(NCCL)
    for e in doc["traceEvents"]:
        if "Group size" in e.get("args", {}):
            e["args"]["Group size"] = 1
    result = analyze(save_doc(tmp_path / "rank0.pt.trace.json", doc), sidecars=False)
    assert all(c["busbw_gbps"] == 0.0 and c["group_size"] == 1 for c in result.measures.communication)
    assert any("group of one rank moves no data" in n for n in result.notes)
    assert "no data moved (busbw 0)" in format_text(result)


@needs_foreign
def test_nccl_sizes_from_record_param_comms_when_kernels_carry_none(tmp_path: Path) -> None:
    """An older trace: the kernels carry no collective arguments, the record_param_comms op that launched them does."""
    doc = _doc(NCCL)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and "Collective name" in e.get("args", {}):
            e["args"] = {k: v for k, v in e["args"].items() if k in ("External id", "device", "stream", "correlation")}
    result = analyze(save_doc(tmp_path / "rank0.pt.trace.json", doc), sidecars=False)
    expected = truth.nccl_figures(raw(NCCL))
    rows = {c["name"]: c for c in result.measures.communication}
    assert rows["AllReduce"]["bytes"] == expected["AllReduce"]["bytes"]
    assert rows["AllReduce"]["busbw_gbps"] == approx(expected["AllReduce"]["busbw_gbps"])


@needs_foreign
def test_collectives_without_sizes_degrade_to_counts_and_times(tmp_path: Path) -> None:
    doc = _doc(NCCL)
    for e in doc["traceEvents"]:
        args = e.get("args", {})
        for key in ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size"):
            args.pop(key, None)
    result = analyze(save_doc(tmp_path / "rank0.pt.trace.json", doc), sidecars=False)
    expected = truth.nccl_figures(raw(NCCL))
    rows = {c["name"]: c for c in result.measures.communication}
    assert rows["AllReduce"]["count"] == expected["AllReduce"]["count"]  # named from the kernel
    assert rows["AllReduce"]["total_ms"] == approx(expected["AllReduce"]["total_ms"])
    assert all(c["bytes"] is None and c["algbw_gbps"] is None and c["busbw_gbps"] is None for c in rows.values())
    assert any("without a message size" in n for n in result.notes)
    assert "perf/window/comm_busbw_gbps" not in result.scalars()
    assert "no message size in the trace" in format_text(result)


@pytest.mark.parametrize("name", SCENARIOS)
def test_h200_copies_launch_and_memory_match_independent_count(name: str) -> None:
    ev = raw(h200(name))
    result = analyzed(h200(name))
    want = truth.copy_figures(ev)
    got = {(c["kind"], c["memory"]): c for c in result.measures.copies}
    assert set(got) == set(want)
    for key, row in got.items():
        assert (row["count"], row["bytes"]) == (want[key]["count"], want[key]["bytes"])
        assert row["total_ms"] == approx(want[key]["total_ms"])
        assert row["gbps"] == approx(want[key]["gbps"])
    launch = truth.launch_figures(ev)
    assert result.measures.launch is not None
    assert result.measures.launch["small_kernels"] == launch["small_kernels"]
    for key in ("p50_us", "p95_us", "launch_call_p50_us", "small_kernel_fraction", "queued_fraction"):
        assert result.measures.launch[key] == approx(launch[key]), key
    idle = launch["idle_p50_us"]
    assert result.measures.launch["idle_p50_us"] == (None if idle is None else approx(idle))
    memory = truth.memory_figures(ev)
    assert result.memory.peak is not None
    assert result.memory.peak["bytes"] == memory["peak"]["bytes"] == result.memory.peak_bytes
    assert result.memory.peak["op"] == memory["peak"]["op"]
    assert result.memory.peak["ts_ms"] == approx(memory["peak"]["ts_ms"])
    held = sorted(memory["held"].items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert [(m["name"], m["bytes"]) for m in result.memory.peak["held_by_op"]] == held
    assert sum(memory["held"].values()) == memory["peak"]["bytes"]  # all that is allocated at the peak, by its op
    assert result.memory.by_op
    for row in result.memory.by_op:
        assert row["self_bytes"] == memory["self_bytes"][row["name"]]
        assert row["calls"] == truth.op_calls(memory, row["name"])  # an op's calls, else the events outside
    ranked = sorted(memory["self_bytes"].values(), reverse=True)[: len(result.memory.by_op)]
    assert [r["self_bytes"] for r in result.memory.by_op] == ranked


def test_scenario_copy_kinds_are_the_documented_ones() -> None:
    """The fixtures README: pageable HtoD in input_bound, DtoD in compute_bound, pinned and pageable DtoH in
    launch_bound_tiny_kernels."""
    kinds = {n: {(c["kind"], c["memory"]) for c in analyzed(h200(n)).measures.copies} for n in SCENARIOS[:3]}
    assert ("HtoD", "pageable") in kinds["input_bound"]
    assert ("DtoD", "device") in kinds["compute_bound"]
    assert {("DtoH", "pinned"), ("DtoH", "pageable")} <= kinds["launch_bound_tiny_kernels"]


def test_no_copy_advice_when_copies_are_a_sliver() -> None:
    """input_bound's six pageable 1 MB copies take 0.07 ms of 1.7 s: no advice about them (never cry wolf)."""
    result = analyzed(h200("input_bound"))
    assert not [r for r in result.recommendations if "pageable memory ran at" in r]


def test_copy_advice_from_rates_when_pageable_is_slow_and_costly(tmp_path: Path) -> None:
    """Slow pageable HtoD copies next to fast pinned ones, taking 20% of the window: advice naming both rates."""
    doc = _doc(h200("sync_bound"))
    lo, hi = truth.window(doc["traceEvents"])
    span = hi - lo
    base = next(e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy")
    for i in range(10):  # 10 pageable copies of 10 MB, 2% of the window each: ~3 GB/s when the window is ~160 ms
        doc["traceEvents"].append({**copy.deepcopy(base), "name": "Memcpy HtoD (Pageable -> Device)",
                                   "ts": lo + (i + 1) * span / 12, "dur": 0.02 * span,
                                   "args": {**base["args"], "bytes": 10_000_000, "correlation": -10 - i}})
    pinned = {**copy.deepcopy(base), "name": "Memcpy HtoD (Pinned -> Device)", "ts": lo + 5.0, "dur": 400.0,
              "args": {**base["args"], "bytes": 10_000_000, "correlation": -99}}  # 25 GB/s
    doc["traceEvents"].append(pinned)
    result = analyze(save_doc(tmp_path / "rank0.pt.trace.json", doc), sidecars=False)
    advice = [r for r in result.recommendations if "pageable memory ran at" in r]
    rows = {(c["kind"], c["memory"]): c for c in result.measures.copies}
    assert len(advice) == 1
    assert len([r for r in result.recommendations if "pageable" in r.lower()]) == 1  # the rates back one advice
    assert f"{rows[('HtoD', 'pageable')]['gbps']:.1f} GB/s" in advice[0]
    assert "the pinned copies' rate in this trace (25.0 GB/s)" in advice[0]
    assert "pin_memory=True" in advice[0]
    alone = window_advice(result.ranks, [])  # no recommendation about copies to carry the rates: the advice itself
    assert len(alone) == 1 and "did not overlap compute: pin the host buffers" in alone[0]
    assert window_advice(result.ranks * 2, [])[0].startswith(f"rank {result.ranks[0].rank}: HtoD copies")
    assert result.scalars()["perf/window/htod_gbps"] == approx(
        sum(c["bytes"] for c in rows.values() if c["kind"] == "HtoD")
        / sum(c["total_ms"] for c in rows.values() if c["kind"] == "HtoD") / 1e6)


def test_copies_without_bytes_are_counted_without_a_rate(tmp_path: Path) -> None:
    doc = _doc(h200("launch_bound_tiny_kernels"))
    for e in doc["traceEvents"]:
        if e.get("cat") == "gpu_memcpy":
            e["args"].pop("bytes")
    result = analyze(save_doc(tmp_path / "rank0.pt.trace.json", doc), sidecars=False)
    want = truth.copy_figures(raw(h200("launch_bound_tiny_kernels")))
    for c in result.measures.copies:
        assert c["count"] == want[(c["kind"], c["memory"])]["count"]
        assert (c["bytes"], c["gbps"]) == (None, None)
    assert any("copies without a byte count" in n for n in result.notes)
    assert "no byte count in the trace" in format_text(result)


@needs_foreign
def test_trace_without_memory_events_has_no_memory_figures() -> None:
    result = analyzed(NCCL)
    assert (result.memory.by_op, result.memory.peak) == ([], None)
    assert "profile_memory=True" in format_text(result, sort="memory")


def test_sidecar_keeps_every_figure(tmp_path: Path) -> None:
    trace = tmp_path / "rank0.pt.trace.json.gz"
    trace.write_bytes(h200("launch_bound_tiny_kernels").read_bytes())
    parsed = analyze(trace, sidecars=False)
    write_sidecar(trace)
    read = analyze(trace)
    assert read.ranks[0].timeline is None  # really from the sidecar
    for key in ("communication", "copies", "launch", "op_table"):
        assert getattr(read.measures, key) == getattr(parsed.measures, key), key
    for key in ("by_op", "peak"):
        assert getattr(read.memory, key) == getattr(parsed.memory, key), key
    assert read.ranks[0].memory.curve == parsed.ranks[0].memory.curve


@needs_foreign
def test_window_summary_and_scalars_carry_the_headline_figures(tmp_path: Path) -> None:
    """The window summary is the sidecar's text and its TensorBoard scalars are the sidecar's scalars."""
    trace = tmp_path / "rank0.pt.trace.json.gz"
    trace.write_bytes(NCCL.read_bytes())
    side = write_sidecar(trace)
    allreduce = next(c for c in analyzed(NCCL).measures.communication if c["name"] == "AllReduce")
    assert "AllReduce x15, " in side["text"] and "launch-call end to kernel start p50" in side["text"]
    assert side["scalars"]["perf/window/comm_busbw_gbps"] == pytest.approx(allreduce["busbw_gbps"])
    assert side["scalars"]["perf/window/launch_p95_us"] == pytest.approx(truth.launch_figures(raw(NCCL))["p95_us"], rel=REL)


@pytest.mark.parametrize("damage", ["no gbps", "text in the memory curve", "a bool in the memory curve"])
def test_sidecar_with_a_malformed_entry_is_not_used(tmp_path: Path, damage: str) -> None:
    trace = tmp_path / "rank0.pt.trace.json.gz"
    trace.write_bytes(h200("sync_bound").read_bytes())
    side = write_sidecar(trace)
    assert analyze(trace).ranks[0].timeline is None  # the sidecar as written is used
    if damage == "no gbps":
        side["rank"]["copies"][0].pop("gbps")
    else:
        side["rank"]["memory_curve"][-1][1] = "x" if damage.startswith("text") else True
    (tmp_path / "rank0.summary.json").write_text(json.dumps(side))
    assert analyze(trace).ranks[0].timeline is not None  # parsed again


def test_report_top_and_sort(capsys: pytest.CaptureFixture[str]) -> None:
    ev = raw(h200("launch_bound_tiny_kernels"))
    calls: dict[str, int] = {}
    for e in ev:
        if e.get("cat") == "cpu_op":
            calls[e["name"]] = calls.get(e["name"], 0) + 1
    assert main(["report", str(h200("launch_bound_tiny_kernels")), "--sort", "calls", "--top", "3"]) == 0
    out = capsys.readouterr().out
    table = out.split("top ops by calls:\n")[1].splitlines()[1:4]
    best = sorted(calls.items(), key=lambda kv: -kv[1])[:3]
    assert [line.split()[-1] for line in table] == [n for n, _ in best]
    assert [int(line.split()[2]) for line in table] == [c for _, c in best]
    assert main(["report", str(h200("launch_bound_tiny_kernels")), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["launch"]) >= {"p50_us", "p95_us", "launch_call_p50_us", "small_kernels", "small_kernel_fraction"}
    assert set(data["copies"][0]) >= {"kind", "memory", "count", "bytes", "total_ms", "gbps"}
    assert set(data["memory_by_op"][0]) == {"name", "self_bytes", "calls"}
    assert set(data["memory_peak"]) >= {"bytes", "op", "ts_ms"}


def test_report_sort_by_memory_and_self_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    memory = truth.memory_figures(raw(h200("sync_bound")))
    assert main(["report", str(h200("sync_bound")), "--sort", "memory", "--top", "2"]) == 0
    out = capsys.readouterr().out
    table = out.split("top ops by self memory:\n")[1].splitlines()[1:3]
    best = sorted(memory["self_bytes"].items(), key=lambda kv: -kv[1])[:2]
    assert [line.split()[-1] for line in table] == [n for n, _ in best]
    assert main(["report", str(h200("sync_bound")), "--sort", "self_cpu"]) == 0
    assert "top ops by self CPU time:" in capsys.readouterr().out


@needs_foreign
def test_text_shows_each_figure() -> None:
    text = format_text(analyzed(NCCL))
    assert "AllReduce x15, " in text and "exposed, busbw " in text and "p50 of calls" in text
    assert "DtoD x960" in text
    assert "launch-call end to kernel start p50" in text


def test_small_copies_show_their_latency_not_a_rate() -> None:
    """sync_bound's 24 four-byte .item() reads ran at "0.003 GB/s": a latency, not a link's speed. The text gives the
    time per copy for copies under 64 kB each, and the rate for the 100 MB DtoD copies."""
    text = format_text(analyzed(h200("sync_bound")))
    rows = {(c["kind"], c["memory"]): c for c in analyzed(h200("sync_bound")).measures.copies}
    per_copy = rows[("DtoH", "pinned")]["total_ms"] * 1e3 / 24
    assert f"  DtoH pinned x24, 96 B: 0.04 ms, {per_copy:.1f} us per copy (4 B each: latency, too small for a " \
           "rate)" in text
    assert "  DtoD x3, 100.7 MB: 0.05 ms, 1893 GB/s" in text
    assert "0.003 GB/s" not in text


def test_memory_text_says_what_is_held_at_the_peak_and_what_self_memory_is() -> None:
    """compute_bound's self memory sums to far more than its 22.6 GB peak (aten::empty 79.0 GB): allocations freed by
    other ops stay in it. The text says so and shows what is held at the peak, by the op that allocated it."""
    text = format_text(analyzed(h200("compute_bound")))
    assert "device memory: peak 22.6 GB allocated in aten::mul" in text
    assert "  held at the peak, by the op that allocated it: aten::empty_strided 7.9 GB, (allocated before the trace) " \
           "4.0 GB, aten::empty 3.2 GB" in text
    assert "memory another op frees still counts, so these are not what is held): aten::empty 79.0 GB" in text


def test_text_shows_memory_and_small_kernels() -> None:
    text = format_text(analyzed(h200("launch_bound_tiny_kernels")))
    assert "device memory: peak 70.2 MB allocated in aten::empty_strided" in text
    assert "1872 kernels under 10 us (100% of kernel time)" in text


def _doc(path: Path) -> dict[str, Any]:
    with truth.gzip.open(path, "rt") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def test_launch_delay_on_a_busy_device_is_queue_depth_not_launch_cost(tmp_path: Path) -> None:
    """Four kernels launched while a 1 ms kernel runs each start when the one before ends (queued); two launched on a
    free device start 3 us after their launch call returned: that is the launch cost, reported apart."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 10_000)]
    events += [launch(10, 1), kernel(20, 1000, 1)]  # found the device free: 20 - (10 + 5) = 5 us
    for i in range(4):  # launched at 100 + 10 i, each starts right after its predecessor ends
        events += [launch(100 + 10 * i, 2 + i), kernel(1020 + 1000 * i, 1000, 2 + i)]
    events += [launch(8000, 9), kernel(8008, 100, 9)]  # free again: 8008 - 8005 = 3 us
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    assert result.measures.launch is not None
    assert result.measures.launch["queued_fraction"] == pytest.approx(4 / 6)
    assert result.measures.launch["idle_p50_us"] == pytest.approx(4.0)  # median of 5 and 3
    gaps = [5, 3] + [1020 + 1000 * i - (105 + 10 * i) for i in range(4)]
    assert result.measures.launch["p50_us"] == pytest.approx(median(gaps))
    text = format_text(result)
    assert "queue depth, not launch cost (67% of kernels waited behind earlier work on a busy device; kernels that " \
           "found the device free: p50 4.0 us)" in text

"""Verdicts, their margin and the recommendations' text, on hand-built results (no trace parsing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze, format_text, render_html
from perf_callbacks.analysis.judge.advice import suggest_num_workers
from perf_callbacks.analysis.judge.verdict import (
    VERDICT_OF,
    Margin,
    verdict_from,
    verdict_margin,
    window_verdict,
)
from perf_callbacks.analysis.results.parts import MemoryParts
from perf_callbacks.analysis.results.result import RankResult, StepResult
from tests.analysis.conftest import load_doc, save_doc, write_trace, x
from tests.analysis.result_helpers import rank
from tests.foreign import HTA as FOREIGN
from tests.foreign import needs_foreign


@pytest.mark.parametrize(("losses", "verdict"), [
    ({}, "compute_bound"),
    ({"input": 0.0999, "sync": 0.05}, "compute_bound"),
    ({"input": 0.10}, "input_bound"),  # the threshold itself counts
    ({"sync": 0.2, "copy": 0.3, "input": 0.1}, "copy_bound"),
    ({"host": 0.5}, "host_bound"),
    ({"communication": 0.5}, "communication_bound"),
    ({"other": 0.5, "sync": 0.49}, "unexplained_idle"),
])
def test_verdict_is_the_largest_loss_from_ten_percent(losses: dict[str, float], verdict: str) -> None:
    assert verdict_from(losses) == verdict
    assert verdict_from(dict(reversed(losses.items()))) == verdict


@pytest.mark.parametrize(("losses", "margin"), [
    ({}, Margin(None, None, "")),
    ({"host": 0.02, "input": 0.104}, Margin(pytest.approx(0.004), "compute_bound",  # type: ignore[arg-type]
                                            "input 10.4%, close to the 10% threshold")),
    ({"host": 0.08}, Margin(pytest.approx(-0.02), "host_bound", "host 8.0%, close to the 10% threshold")),  # type: ignore[arg-type]
    ({"host": 0.05}, Margin(pytest.approx(-0.05), "host_bound", "")),  # type: ignore[arg-type]
    ({"input": 0.13}, Margin(0.03, "compute_bound", "")),  # exactly 3 points above: not close
    ({"input": 0.10}, Margin(0.0, "compute_bound", "input 10.0%, close to the 10% threshold")),
    ({"other": 0.09}, Margin(pytest.approx(-0.01), "unexplained_idle",  # type: ignore[arg-type]
                             "unexplained idle 9.0%, close to the 10% threshold")),
    ({"sync": 0.28, "input": 0.30}, Margin(pytest.approx(0.2), "sync_bound",  # type: ignore[arg-type]
                                           "input 30.0%, close to sync 28.0%")),
    ({"input": 0.3, "other": 0.29}, Margin(pytest.approx(0.2), "unexplained_idle",  # type: ignore[arg-type]
                                           "input 30.0%, close to unexplained idle 29.0%")),
    ({"input": 0.5, "sync": 0.2}, Margin(pytest.approx(0.4), "sync_bound", "")),  # type: ignore[arg-type]
    ({"input": 0.5, "sync": 0.1}, Margin(pytest.approx(0.4), "sync_bound", "")),  # type: ignore[arg-type]
    ({"input": 0.5, "sync": 0.09}, Margin(pytest.approx(0.4), "compute_bound", "")),  # type: ignore[arg-type]
    ({"input": 0.25, "copy": 0.22}, Margin(pytest.approx(0.15), "copy_bound", "")),  # type: ignore[arg-type]
])
def test_margin_names_what_the_verdict_would_flip_to(losses: dict[str, float], margin: Margin) -> None:
    assert verdict_margin(losses) == margin


def test_every_cause_has_a_verdict_and_advice() -> None:
    assert VERDICT_OF == {"input": "input_bound", "host": "host_bound", "sync": "sync_bound", "copy": "copy_bound",
                          "communication": "communication_bound", "other": "unexplained_idle",
                          "cpu_contention": "cpu_contention"}
    for cause in VERDICT_OF:
        assert len(rank(losses={cause: 0.5}).recommendations) == 1


def test_recommendations_largest_loss_first_from_five_percent() -> None:
    r = rank(losses={"sync": 0.05, "host": 0.0499, "input": 0.3, "other": 0.12},
             sync_calls_ms={"aten::item": 3.0})
    assert r.verdict == "input_bound"
    assert [t.split(" ")[0] for t in r.recommendations] == ["data", "unexplained", "the"]
    assert r.recommendations[2].startswith("the device went idle right after blocking calls returned, 5% of")


def test_no_advice_for_a_small_loss_of_a_compute_bound_window() -> None:
    """The report's compute-bound window: data loading 2% of step time with num_workers=0 got "try num_workers=2"."""
    r = rank(losses={"input": 0.02, "host": 0.03}, gpu_utilization=0.95, data_wait_fraction=0.02,
             data_loader="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    assert r.verdict == "compute_bound"
    assert len(r.recommendations) == 1 and r.recommendations[0].startswith("compute-bound (GPU busy 95%")


def test_compute_bound_leads_with_the_compute_advice() -> None:
    top = {"name": "aten::mm", "fraction": 0.42, "device": "GPU"}
    r = rank(losses={"input": 0.05}, gpu_utilization=0.93, top_ops=[top], backlog_fraction=0.02,
             memory=MemoryParts(peak_bytes=10**9, device_bytes=80 * 10**9))
    assert r.verdict == "compute_bound"
    assert r.recommendations[0] == "compute-bound (GPU busy 93%; aten::mm has 42% of self GPU time): speed up the " \
                                   "math itself: bf16/TF32, torch.compile, fused or flash attention kernels"
    assert r.recommendations[1].startswith("data loading took 0.0% of step time (device idle 5%")
    assert r.recommendations[2].startswith("backlog 2%: at the window's start")
    assert r.recommendations[3] == "peak memory only 1.00 of 80 GB (1%): there is room for a larger batch"
    assert len(r.recommendations) == 4


def test_compute_advice_without_a_device_or_on_another_device() -> None:
    """No device in the trace: the time is host compute; CUDA profiling is suggested only where the machine had CUDA."""
    assert rank(gpu_utilization=None).recommendations == [
        "host compute: no device in the trace, and no removable host-side loss found (no single op leads): speed up "
        "the host code"]
    assert rank(gpu_utilization=None, cuda_on_host=True).recommendations == [
        "host compute: no device in the trace, and no removable host-side loss found (no single op leads): speed up "
        "the host code, or profile with activities=[CPU, CUDA] to see the device"]
    assert rank(gpu_utilization=0.5, device_kind="xpu").recommendations == [
        "compute-bound (device busy 50%; no single op leads): speed up the device kernels themselves"]
    assert rank(gpu_utilization=0.5, device_kind="cuda").recommendations[0].startswith("compute-bound (GPU busy 50%;")


def test_backlog_note_from_two_percent() -> None:
    assert len(rank(backlog_fraction=0.0199).recommendations) == 1
    assert rank(backlog_fraction=0.5).recommendations[1] == (
        "backlog 50%: at the window's start the device was still running work queued before it (its first op started "
        "long after its launch); that time is not host idle, and the window is too short to judge: profile more "
        "steps (schedule.active) to see the steady state")


CAVEAT = "with_stack=True was on in this window: it adds host time to every op this process runs, "


@pytest.mark.parametrize(("verdict_cause", "at", "machine", "effect"), [
    ("host", 1, {}, "so host-side figures are inflated; profile again without it to confirm a host-bound verdict"),
    ("sync", 1, {}, "and after each sync the device idles until the host launches again, so the sync time is "
                    "inflated with it; profile again without it to measure what the syncs cost"),
    ("input", 1, {"num_workers": 2, "cpu_cores": 4, "local_world_size": 1}, "not the DataLoader's worker processes, so the wait for data behind this verdict "
                                     "is not inflated (unless num_workers=0, where loading runs here); only the host "
                                     "op times are"),
    ("input", 1, {"num_workers": 0, "cpu_cores": 4, "local_world_size": 1}, "and with num_workers=0 the loading runs in this process, so the data wait is "
                                     "inflated with it; profile again without it to time the loading"),
    ("copy", 1, {}, "not the device's copies, so the copies' time behind this verdict is not inflated; only the host "
                    "op times are"),
    ("communication", 1, {}, "not the device's collectives, so the collectives' time behind this verdict is not "
                             "inflated; only the host op times are"),
    ("other", 1, {}, "so host op times are inflated, and part of the unexplained idle may be that host time; profile "
                     "again without it"),
])
def test_profiler_caveat_says_what_it_inflates_for_the_verdict(verdict_cause: str, at: int, machine: dict[str, Any],
                                                               effect: str) -> None:
    """Host overhead inflates what each verdict rests on differently: only a host-bound verdict is to "confirm".

    The caveat follows the verdict's recommendation (whose figure it qualifies), whatever the gains of the others."""
    second = "copy" if verdict_cause != "copy" else "sync"
    r = rank(losses={verdict_cause: 0.4, second: 0.2}, copies_ms={"memset": 1.0}, profiler_flags=["with_stack"],
             memory=MemoryParts(peak_bytes=95, device_bytes=100), machine=machine)
    assert r.recommendations[at] == CAVEAT + effect
    assert r.recommendations[-1] == "peak memory 0.00 of 0 GB (95%): close to OOM; use activation checkpointing or a " \
                                    "smaller batch"
    assert len(r.recommendations) == 4


def test_profiler_caveat_names_each_flag() -> None:
    r = rank(losses={"host": 0.4}, profiler_flags=["profile_memory", "record_shapes", "with_stack"])
    assert r.recommendations[1].startswith("record_shapes=True and with_stack=True were on in this window: ")
    assert rank(losses={"host": 0.4}, profiler_flags=["profile_memory", "with_flops"]).recommendations == \
        rank(losses={"host": 0.4}).recommendations


def test_profiler_caveat_of_a_compute_bound_verdict() -> None:
    """On the device, host overhead can only hide a compute-bound verdict: no "confirm a host-bound verdict"; on a
    trace without a device the host op times themselves are inflated."""
    assert rank(profiler_flags=["record_shapes"]).recommendations == rank().recommendations
    host = rank(gpu_utilization=None, profiler_flags=["record_shapes"])
    assert host.recommendations[1] == "record_shapes=True was on in this window: it adds host time to every op this " \
                                      "process runs, so the host op times are inflated; profile again without it to " \
                                      "time the host code"


@pytest.mark.parametrize(("peak", "total", "verdict_cause", "note"), [
    (None, 100, None, None),
    (50, None, None, None),
    (50, 0, None, None),
    (90, 100, "input", "peak memory 0.00 of 0 GB (90%): close to OOM; use activation checkpointing or a smaller batch"),
    (89, 100, None, None),
    (29, 100, None, "peak memory only 0.00 of 0 GB (29%): there is room for a larger batch"),
    (29, 100, "host", "peak memory only 0.00 of 0 GB (29%): there is room for a larger batch"),
    (29, 100, "input", None),
    (30, 100, None, None),
    (int(2.5e9), int(40e9), None, "peak memory only 2.50 of 40 GB (6%): there is room for a larger batch"),
])
def test_memory_note(peak: int | None, total: int | None, verdict_cause: str | None, note: str | None) -> None:
    losses = {verdict_cause: 0.5} if verdict_cause else {}
    r = rank(memory=MemoryParts(peak_bytes=peak, device_bytes=total), losses=losses)
    assert (r.recommendations[-1] if note else r.recommendations[-1].startswith("peak memory")) == (note or False)


def test_input_advice_for_a_single_process_loader_and_any_other() -> None:
    single = rank(losses={"input": 0.6}, data_wait_fraction=0.0099,
                  data_loader="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    assert single.recommendations == [
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ took 1.0% of step time with num_workers=0 "
        f"(device idle 60%): try num_workers={suggest_num_workers()} (the CPU cores per local rank, up to 8) and set "
        "pin_memory=True, persistent_workers=True"]
    other = rank(losses={"input": 0.6}, data_wait_fraction=0.7, data_loader="my_loader")
    assert other.recommendations == [
        "my_loader took 70% of step time (device idle 60% waiting for batches): raise num_workers or "
        "prefetch_factor, or make __getitem__ cheaper (decode/augment on the GPU, cache preprocessed samples)"]


@pytest.mark.parametrize(("gpu_utilization", "device_kind", "pin"), [
    (0.5, "cuda", True),
    (None, None, False),  # a CPU-only trace: no device to copy to, so no pinned memory
    (0.5, "rocm", False),  # no CUDA advice for ROCm or MTIA
])
def test_pin_memory_advice_only_with_cuda_device_activity(gpu_utilization: float | None, device_kind: str | None,
                                                          pin: bool) -> None:
    r = rank(losses={"input": 0.6}, data_wait_fraction=0.6, gpu_utilization=gpu_utilization, device_kind=device_kind,
             data_loader="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    assert ("pin_memory=True" in r.recommendations[0]) is pin
    assert ("device idle 60%" in r.recommendations[0]) is (gpu_utilization is not None)  # no device: no device idle
    assert r.recommendations[0].endswith("persistent_workers=True")


def test_sync_advice_names_the_first_three_blocking_calls() -> None:
    calls = {"aten::item": 12.34, "aten::_local_scalar_dense": 5.0, "cudaStreamSynchronize": 1.25, "aten::cpu": 1.0}
    assert rank(losses={"sync": 0.25}, sync_calls_ms=calls).recommendations == [
        "the device went idle right after blocking calls returned, 25% of the time: aten::item (12.3 ms), "
        "aten::_local_scalar_dense (5.0 ms), cudaStreamSynchronize (1.2 ms): remove .item()/.cpu()/print(tensor) "
        "from the step, keep metrics on the device and read them every N steps"]


def test_host_advice_on_cuda_and_on_other_devices() -> None:
    cuda = rank(losses={"host": 0.4}, launches_per_step=812.4, gpu_utilization=0.3)
    assert cuda.recommendations == [
        "the device waited 40% of the time for the host to launch work (812 kernels per step, GPU busy 30%): cut "
        "Python and launch overhead with torch.compile or CUDA graphs, fused/foreach optimizers, and a larger batch "
        "per step"]
    other = rank(losses={"host": 0.4}, gpu_utilization=None, device_kind="mps")
    assert other.recommendations == [
        "the device waited 40% of the time for the host to launch work (device busy 0.0%): cut Python and launch "
        "overhead: fewer, larger ops and a larger batch per step"]
    assert rank(losses={"host": 0.4}, device_kind="cuda").recommendations[0].endswith(
        "(GPU busy 50%): cut Python and launch overhead with torch.compile or CUDA graphs, fused/foreach optimizers, "
        "and a larger batch per step")


def test_copy_advice_ranks_exposed_copies_and_drops_small_ones() -> None:
    exposed = {"DtoD/device": 2.0, "HtoD/pageable": 10.0, "odd/kind": 1.0, "memset": 0.99, "DtoH/pinned": 5.0}
    r = rank(losses={"copy": 0.3}, copy_exposed_ms=exposed, copies_ms={"PtoP/device": 50.0})
    assert r.recommendations == [
        "copies not overlapped with compute took 30% of the time; by kind, HtoD/pageable 10.0 ms: copy from pinned "
        "memory (DataLoader pin_memory=True) with .to(device, non_blocking=True); DtoH/pinned 5.0 ms: read results "
        "back less often: keep metrics on the device and fetch them every N steps; DtoD/device 2.0 ms: the data is "
        "already on the device: find the ops that copy it (.contiguous(), .clone(), dtype casts, torch.cat, "
        "non-fused optimizer states) and use views, in-place or fused ops"]
    small = rank(losses={"copy": 0.3}, copies_ms={"odd/kind": 1.0, "memset": 0.1, "PtoP/device": 0.09})
    assert small.recommendations == [
        "copies not overlapped with compute took 30% of the time; by kind, odd/kind 1.0 ms: overlap it with compute on "
        "a side stream; memset 0.1 ms: buffers are zeroed on the device: use zero_grad(set_to_none=True) and "
        "torch.empty where the values are overwritten"]


@pytest.mark.parametrize(("kind", "fix"), [
    ("DtoH/pageable", "read results back less often, into pinned buffers, with non_blocking=True"),
    ("HtoD/pinned", "start the next batch's copy early (non_blocking=True on a side stream, or a prefetcher) so it "
                    "overlaps compute"),
    ("DtoH/device", "read results back less often: keep metrics on the device and fetch them every N steps"),
    ("PtoP/device", "peer-to-peer copies between devices: keep each tensor on the device that uses it, or move the "
                    "transfer into a collective"),
])
def test_copy_fix_by_kind(kind: str, fix: str) -> None:
    assert rank(losses={"copy": 0.3}, copies_ms={kind: 3.0}).recommendations[0].endswith(f"{kind} 3.0 ms: {fix}")


def test_communication_advice_with_and_without_named_collectives() -> None:
    ops = {"nccl:all_reduce": 30.0, "nccl:all_gather": 5.55, "nccl:broadcast": 1.0, "nccl:send": 0.5}
    r = rank(losses={"communication": 0.2}, comm_ms={"total": 40.0, "overlapped": 10.25}, collectives_by_op_ms=ops)
    assert r.recommendations == [
        "collectives (nccl:all_reduce 30.0 ms, nccl:all_gather 5.5 ms, nccl:broadcast 1.0 ms) were exposed 20% of "
        "the time (40.0 ms in collectives, 10.2 ms overlapped with compute): overlap them (DDP bucket_cap_mb, FSDP "
        "prefetch), fix stragglers first, or communicate less often (gradient accumulation with no_sync)"]
    assert rank(losses={"communication": 0.2}).recommendations[0].startswith(
        "collectives were exposed 20% of the time (0.0 ms in collectives, 0.0 ms overlapped with compute): ")


def test_unexplained_idle_advice_mentions_graph_replays_from_one_percent() -> None:
    tail = "; look at cross-stream waits (cudaStreamWaitEvent), work on other devices or processes, and the gaps " \
           "in an Nsight Systems timeline (perf-callbacks nsys)"
    lead = "unexplained idle 15%: the device idled although its next op had already been launched"
    assert rank(losses={"other": 0.15}, graph_idle_fraction=0.0099).recommendations == [lead + tail]
    assert rank(losses={"other": 0.15}, graph_idle_fraction=0.01).recommendations == [
        f"{lead}; 1% of the window is inside CUDA graph replays (between kernels of one cudaGraphLaunch): look for "
        f"graph nodes waiting on other streams, events or host nodes{tail}"]


def test_copy_advice_drops_kinds_under_a_tenth_of_the_largest() -> None:
    r = rank(losses={"copy": 0.3}, copies_ms={"HtoD/pageable": 10.0, "memset": 0.5})
    assert r.recommendations[0].endswith("with .to(device, non_blocking=True)")  # the memset line is left out


def test_memory_is_in_decimal_gigabytes() -> None:
    r = rank(memory=MemoryParts(peak_bytes=1_235_000_001, device_bytes=80_500_000_001))
    assert r.recommendations[-1] == "peak memory only 1.24 of 81 GB (2%): there is room for a larger batch"


def test_gpu_only_trace_is_never_host_bound_from_missing_host_events(tmp_path: Path) -> None:
    """Kernels and copies without any CPU op or runtime call: no launch times, so no evidence the host was late."""
    doc = load_doc("sync_bound")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    result = analyze(save_doc(tmp_path / "gpuonly.json", doc))
    rank = result.ranks[0]
    assert result.verdict != "host_bound" and rank.losses.get("host", 0.0) == 0.0
    assert result.gpu_utilization == pytest.approx(0.713, abs=0.001)
    recs = result.recommendations  # the precision hint's larger gain first, then the verdict's own advice
    assert recs[0].cause == "precision" and recs[1].startswith("the host side was not traced") and "29%" in recs[1]
    assert any("the host side was not traced" in n for n in result.notes)
    assert "host_bound" not in format_text(result)


def stepped(step_ms: list[float], input_ms: list[float], **fields: Any) -> RankResult:
    """A rank whose steps took ``step_ms`` and waited ``input_ms`` for data; its losses are the window's sums."""
    steps = [StepResult(n, ms, {"compute": ms - wait, "input": wait}) for n, (ms, wait) in
             enumerate(zip(step_ms, input_ms, strict=True), 10)]
    return rank(steps=steps, step_time_ms=sorted(step_ms)[len(step_ms) // 2], span_ms=sum(step_ms),
                data_wait_fraction=sum(input_ms) / sum(step_ms), losses={"input": sum(input_ms) / sum(step_ms)},
                data_loader="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", **fields)


def test_one_slow_fetch_does_not_make_a_window_input_bound() -> None:
    """The fast in-memory loader of the report: about 20% of the window from one 15 ms fetch in three steps."""
    r = stepped([30.0, 45.0, 30.0], [1.2, 16.2, 1.2], gpu_utilization=None)
    assert r.losses["input"] == pytest.approx(0.177, abs=0.001)
    assert r.verdict == "compute_bound"
    assert not any("num_workers" in t for t in r.recommendations)
    verdict, margin = window_verdict([r])
    assert verdict == "compute_bound"
    assert margin.note == "data wait 17.7% of the window, but 4.0% in the median step: a few slow fetches (the " \
                          "longest 16.2 ms), not a slow loader"


def test_a_median_step_under_one_millisecond_of_data_wait_is_not_input_bound() -> None:
    """A 0.6 ms fetch in 3 ms steps is 20% of the window, but it is the loop's own work between batches (the live
    check's 1 ms floor); the same shares at ten times the scale are input-bound."""
    fast = stepped([3.0, 3.0, 3.0], [0.6, 0.6, 0.6])
    assert fast.verdict == "compute_bound" and not any("num_workers" in t for t in fast.recommendations)
    assert window_verdict([fast])[1].note.startswith("data wait 20.0% of the window, but the median step waited 0.6 "
                                                     "ms: under 1 ms is the loop's own work between batches")
    slow = stepped([30.0, 30.0, 30.0], [6.0, 6.0, 6.0])
    assert slow.verdict == "input_bound" and window_verdict([slow]) == ("input_bound", Margin(
        pytest.approx(0.1), "compute_bound", ""))  # type: ignore[arg-type]


def test_a_slow_loader_stays_input_bound_through_one_fast_step() -> None:
    r = stepped([30.0, 30.0, 12.0], [18.0, 18.0, 0.2])  # the median step waited 18 ms of 30
    assert r.verdict == "input_bound"
    assert window_verdict([r])[0] == "input_bound"


def test_a_window_at_the_threshold_says_so() -> None:
    r = stepped([30.0, 30.0, 30.0], [2.9, 3.1, 3.3])  # 10.3% of the median step
    assert window_verdict([r]) == ("input_bound", Margin(pytest.approx(0.0033, abs=1e-4),  # type: ignore[arg-type]
                                                         "compute_bound", "input 10.3%, close to the 10% threshold"))
    under = stepped([30.0, 30.0, 30.0, 30.0], [2.7, 2.8, 2.9, 30.0])  # one 30 ms wait lifts the window to 32%
    verdict, margin = window_verdict([under])
    assert verdict == "compute_bound"
    assert margin.note.startswith("input 9.3%, close to the 10% threshold; data wait 32.0% of the window, but 9.3% in")


def test_without_steps_the_window_share_decides() -> None:
    assert rank(losses={"input": 0.104}).verdict == "input_bound"  # a trace without ProfilerStep: no median to take


MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def machine(cores: int, local: int, workers: int | None, cuda: bool = False) -> dict[str, Any]:
    return {"cpu_cores": cores, "local_world_size": local, "num_workers": workers, "loader": "train_dataloader",
            "cuda": cuda}


@pytest.mark.parametrize(("cores", "local", "workers"), [(2, 1, 2), (16, 8, 2), (16, 8, 4)])
def test_no_more_workers_when_they_already_use_every_core(cores: int, local: int, workers: int) -> None:
    """The README's diff example: num_workers=2 on 2 cores got "raise num_workers"; more workers cannot help."""
    r = rank(losses={"input": 0.21}, data_wait_fraction=0.21, gpu_utilization=None, data_loader=MULTI,
             machine=machine(cores, local, workers))
    assert r.recommendations == [
        f"{MULTI} took 21% of step time (21% of the window waiting for batches): num_workers={workers} already uses "
        f"the {cores // local} CPU cores per local rank, so more workers cannot help: cut what each batch costs to "
        "hand over between processes: larger batches, fewer and larger tensors per batch, or in-memory data read in "
        "the main process (num_workers=0); or keep the data on the device; or make __getitem__ cheaper (cache "
        "preprocessed samples)"]


def test_more_workers_up_to_the_cores_of_the_machine_that_ran_it() -> None:
    fewer = rank(losses={"input": 0.3}, data_wait_fraction=0.3, data_loader=MULTI, machine=machine(16, 2, 3, True))
    assert "raise num_workers (up to 8, the CPU cores per local rank) or prefetch_factor" in fewer.recommendations[0]
    none = rank(losses={"input": 0.3}, data_wait_fraction=0.3, data_loader=SINGLE, machine=machine(64, 8, 0, True))
    assert "with num_workers=0 (device idle 30%): try num_workers=8 (the CPU cores per local rank, up to 8)" in \
        none.recommendations[0]  # the recording machine's 8 cores per rank, whatever this machine has
    ours = rank(losses={"input": 0.3}, data_wait_fraction=0.3, data_loader="perf_callbacks.data_wait",
                machine=machine(2, 1, 0))  # our data_wait spans alone: num_workers comes from the metadata
    assert "with num_workers=0" in ours.recommendations[0] and "try num_workers=2" in ours.recommendations[0]


def test_a_trace_without_a_device_says_host_compute(tmp_path: Path) -> None:
    """Our own CPU runs and HTA's CPU-only traces read "compute_bound" with "GPU utilization: n/a", like a GPU verdict."""
    events = [x("user_annotation", f"ProfilerStep#{n}", n * 1000, 1000) for n in range(3)]
    events += [x("cpu_op", "aten::mm", n * 1000 + 10, 900) for n in range(3)]
    result = analyze(write_trace(tmp_path / "cpu.json", events))
    assert result.verdict == "compute_bound" and result.device == "none" and result.to_dict()["device"] == "none"
    text = format_text(result)
    assert "verdict: compute_bound (host compute, no device in the trace)\n" in text
    assert "device: none in the trace (no device activity recorded): every figure below is host time" in text
    assert "GPU" not in text and "activities=[CPU, CUDA]" not in text
    gpu = analyze(save_doc(tmp_path / "gpu.json", load_doc("compute_bound")))
    assert gpu.device == "cuda" and "verdict: compute_bound\n" in format_text(gpu)


def test_the_html_page_of_a_trace_without_a_device(tmp_path: Path) -> None:
    events = [x("user_annotation", f"ProfilerStep#{n}", n * 1000, 1000) for n in range(3)]
    events += [x("cpu_op", "aten::mm", n * 1000 + 10, 900) for n in range(3)]
    page = render_html(analyze(write_trace(tmp_path / "cpu.json", events)))
    assert "compute_bound (host compute, no device in the trace)" in page and "GPU utilization" not in page


@needs_foreign
@pytest.mark.parametrize(("folder", "verdict", "cuda"), [
    ("rank_non_gpu", "compute_bound", False),  # no GPU anywhere in the trace: no CUDA profiling advice
    ("rank_unavailable", "compute_bound", False),
    ("distributed_info_unavailable", "compute_bound", True),  # 8 GPUs in deviceProperties, none traced
    ("cupti_profiler", "compute_bound", True),  # runtime calls but no kernel records
    ("cpu_only", "communication_bound", False),
])
def test_hta_traces_without_a_device_read_as_host_time(folder: str, verdict: str, cuda: bool) -> None:
    result = analyze(FOREIGN / folder)
    assert result.verdict == verdict and result.device == "none" and result.gpu_utilization is None
    text = format_text(result)
    assert "GPU utilization" not in text and "device: none in the trace (no device activity recorded" in text
    assert ("(host compute, no device in the trace)" in text.splitlines()[1]) is (verdict == "compute_bound")
    assert ("activities=[CPU, CUDA]" in text) is cuda


def test_the_window_averages_each_loss_over_its_ranks_a_missing_one_as_zero() -> None:
    """Rank 1's trace has no sync loss at all (e.g. a CPU-only rank): the window's sync is (0.4 + 0) / 2."""
    ranks = [rank(losses={"sync": 0.4, "host": 0.1}), rank(rank=1, losses={"host": 0.1})]
    assert window_verdict(ranks) == ("sync_bound", Margin(pytest.approx(0.1), "host_bound", ""))  # type: ignore[arg-type]

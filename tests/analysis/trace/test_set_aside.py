"""Validation and checkpoint time inside a window is set aside, and data wait is the training loader's only.

The traces are shaped as the Lightning repro's: three training steps of about 1.3 ms whose fetch takes 0.1 ms, and
step 4 holding a ``perf_callbacks.validation`` span with four 16.6 ms fetches from the validation loader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze, format_text
from perf_callbacks.analysis.sidecar import read_sidecar, sidecar_path, write_sidecar
from tests.analysis.conftest import kernel, launch, write_trace, x

SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def training_step(t0: float, step: int, own: bool, gpu: bool, loader: str = SINGLE) -> list[dict[str, Any]]:
    """One 1300 us step: a 100 us fetch, then 1100 us of work (a CPU op, or a launched kernel on the device)."""
    out = [x("user_annotation", f"ProfilerStep#{step}", t0, 1300.0)]
    if own:
        out.append(x("cpu_op", "perf_callbacks.data_wait", t0 + 5, 110.0))
    out.append(x("user_annotation", loader, t0 + 10, 100.0))
    out.append(x("cpu_op", "aten::addmm", t0 + 150, 1100.0))
    if gpu:
        out += [launch(t0 + 150, step), kernel(t0 + 160, 1100.0, step)]
    return out


def validation(t0: float, kind: str = "validation", gpu: bool = False) -> list[dict[str, Any]]:
    """A 70 ms validation (or checkpoint) span holding four 16.6 ms fetches from another loader."""
    out = [x("cpu_op", f"perf_callbacks.{kind}", t0, 70_000.0)]
    for i in range(4):
        out.append(x("user_annotation", MULTI, t0 + 100 + i * 17_000, 16_600.0))
        if gpu:
            out += [launch(t0 + 16_800 + i * 17_000, 100 + i), kernel(t0 + 16_810 + i * 17_000, 150.0, 100 + i)]
    return out


def window(folder: Path, own: bool = True, aside: str | None = "validation", gpu: bool = False) -> Path:
    """Steps 3-5; step 4 holds the validation (or checkpoint) span after its training work when ``aside``."""
    folder.mkdir(parents=True, exist_ok=True)
    events = training_step(0, 3, own, gpu) + training_step(1300, 4, own, gpu)
    if aside:
        events = [e if e["name"] != "ProfilerStep#4" else {**e, "dur": 71_300.0} for e in events]
        events += validation(2600, aside, gpu)
    start5 = 72_600.0 if aside else 2600.0
    events += training_step(start5, 5, own, gpu)
    return write_trace(folder / "rank0.pt.trace.json", events)


@pytest.mark.parametrize("own", [True, False], ids=["our_data_wait_spans", "dataloader_events_only"])
def test_validation_in_a_window_is_neither_step_time_nor_data_wait(tmp_path: Path, own: bool) -> None:
    result = analyze(window(tmp_path / "val", own=own))
    base = analyze(window(tmp_path / "none", own=own, aside=None))
    assert result.verdict == base.verdict == "compute_bound"
    assert result.step_time_ms == pytest.approx(1.3)
    assert [s.time_ms for s in result.ranks[0].steps] == pytest.approx([1.3, 1.3, 1.3])
    assert result.data_wait_fraction == pytest.approx(base.data_wait_fraction)
    assert result.data_wait_fraction == pytest.approx((110 if own else 100) / 1300)
    causes = {k: sum(s.causes_ms.get(k, 0.0) for s in result.ranks[0].steps) for k in ("input", "compute", "other")}
    assert sum(causes.values()) == pytest.approx(3 * 1.3)  # the 70 ms of validation is no cause at all
    assert result.ranks[0].set_aside_ms == {"validation": 70.0}
    assert result.ranks[0].data_loader == SINGLE  # the training loader's name, not the validation loader's
    note = "validation 70.0 ms set aside in this window: not step time, data wait or a cause of idle time"
    assert result.notes == [note]  # a CPU trace: no GPU utilization to leave it out of
    assert f"note: {note}" in format_text(result)


def test_checkpoint_and_device_time_inside_are_set_aside_from_gpu_utilization(tmp_path: Path) -> None:
    result = analyze(window(tmp_path / "ckpt", aside="checkpoint", gpu=True))
    base = analyze(window(tmp_path / "none", aside=None, gpu=True))
    assert result.gpu_utilization == pytest.approx(base.gpu_utilization)
    assert result.gpu_utilization == pytest.approx(3 * 1100 / 3900)
    assert result.ranks[0].losses == pytest.approx(base.ranks[0].losses)
    assert result.ranks[0].launches_per_step == 1.0  # the checkpoint's kernels are not the steps'
    assert result.verdict == base.verdict
    assert result.ranks[0].set_aside_ms == {"checkpoint": 70.0}
    assert result.notes[0].startswith("checkpoint 70.0 ms set aside in this window")


def test_our_data_wait_spans_are_the_authority_over_dataloader_events(tmp_path: Path) -> None:
    """A DataLoader next() outside our data_wait spans (the user's own loader inside the step) is not data wait."""
    events = training_step(0, 3, own=True, gpu=False) + training_step(1300, 4, own=True, gpu=False)
    events.append(x("user_annotation", MULTI, 400.0, 800.0))  # inside step 3's work, outside data_wait
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events))
    assert result.data_wait_fraction == pytest.approx(2 * 110 / 2600)
    assert result.ranks[0].data_loader == SINGLE


def test_our_data_wait_spans_without_a_dataloader_event_name_themselves(tmp_path: Path) -> None:
    events = [e for e in training_step(0, 3, own=True, gpu=False) if e["name"] != SINGLE]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events))
    assert result.ranks[0].data_loader == "perf_callbacks.data_wait"
    assert result.notes == []


def test_the_window_summary_sidecar_says_what_was_set_aside(tmp_path: Path) -> None:
    side = write_sidecar(window(tmp_path))
    assert "note: validation 70.0 ms set aside in this window" in side["text"]
    assert side["rank"]["set_aside_ms"] == {"validation": 70.0}
    assert side["verdict"] == "compute_bound"


def test_several_ranks_give_the_mean_per_rank(tmp_path: Path) -> None:
    folder = tmp_path / "window-000003-000005"
    window(folder)
    window(tmp_path / "r1", aside="checkpoint").rename(folder / "rank1.pt.trace.json")
    result = analyze(folder)
    assert len(result.ranks) == 2
    assert result.notes[-1].startswith("checkpoint 35.0 ms and validation 35.0 ms per rank (mean of 2) set aside")


def test_a_sidecar_written_before_validation_was_set_aside_is_not_used(tmp_path: Path) -> None:
    """A version-1 sidecar holds the old figures (validation counted as data wait): the trace is parsed again."""
    trace = window(tmp_path)
    side = write_sidecar(trace)
    side.update(format="perf-callbacks-sidecar/1", verdict="input_bound")
    side["rank"].update(verdict="input_bound", data_wait_fraction=0.91)
    sidecar_path(trace).write_text(json.dumps(side))
    assert read_sidecar(trace) is None
    assert analyze(trace).verdict == "compute_bound"


def test_the_note_leaves_out_what_is_under_one_percent_of_the_window() -> None:
    """Our own logging at a logging step usually takes a fraction of a millisecond: not worth a note."""
    from types import SimpleNamespace

    from perf_callbacks.analysis.windows.api import _aside_note

    def rank(**aside: float) -> Any:
        return SimpleNamespace(span_ms=100.0, set_aside_ms=aside, gpu_utilization=0.5)

    assert _aside_note([rank(**{"perf-callbacks' own logging": 0.4})]) == []
    (note,) = _aside_note([rank(validation=69.4, **{"perf-callbacks' own logging": 0.4})])
    assert note.startswith("validation 69.4 ms set aside in this window")
    (note,) = _aside_note([rank(**{"perf-callbacks' own logging": 30.0})])
    assert note.startswith("perf-callbacks' own logging 30.0 ms set aside")
    assert note.endswith("a cause of idle time or GPU utilization")


def test_cupti_range_profiler_kernel_replays_are_set_aside_not_host_compute(tmp_path: Path) -> None:
    """HTA's ``cupti_profiler``: under the CUPTI range profiler (its ``cuda_profiler_range`` events) each kernel is
    replayed once per metric pass inside its ``cudaLaunchKernel``, 44% of that trace's host time, which was "host
    compute". Here a 1000 us conv op holds a 600 us launch call: that is the profiler's, set aside."""
    events = [x("cpu_op", "aten::cudnn_convolution", 0, 1_000), x("cpu_op", "aten::add_", 1_100, 100),
              x("cuda_runtime", "cudaLaunchKernel", 200, 600, correlation=1),
              {**x("cuda_profiler_range", "void conv_kernel", 250, 500, **{"smsp__inst_executed.sum": 1}),
               "pid": 0, "tid": 0}]
    rank = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False).ranks[0]
    assert rank.set_aside_ms == pytest.approx({"CUPTI range profiler kernel replays": 0.6})
    result = analyze(tmp_path / "rank0.pt.trace.json", sidecars=False)
    text = format_text(result)
    assert "time by cause: compute 83.3%" in text  # 500 us of the 600 left; was 91.7%
    assert "replays 0.6 ms set aside in this window: not step time, data wait or a cause of idle time\n" in text
    top = {o["name"]: o["self_time_us"] for o in rank.top_ops}
    assert top == {"aten::cudnn_convolution": 400.0, "aten::add_": 100.0}  # its self time less the replays
    control = analyze(write_trace(tmp_path / "no_range.pt.trace.json", events[:3]), sidecars=False).ranks[0]
    assert control.set_aside_ms == {}  # without the range profiler, a long launch call is the host's own time

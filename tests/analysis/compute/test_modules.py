"""Device time, FLOPs and parameters by module, on traces whose every microsecond the test places."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze, format_text, render_html
from perf_callbacks.analysis.compute.modules import OUTSIDE, at_depth, group_of, set_depth
from perf_callbacks.analysis.compute.modules_text import TURN_ON
from perf_callbacks.cli import main

SPAN = "perf_callbacks.module/"
FLOPS = {"stem": 100, "blocks.0.fc": 300, "blocks.1.fc": 300, "blocks.0": 0}
PARAMS = {"stem": 10, "blocks.0.fc": 36, "blocks.1.fc": 36}
BACKWARD = "autograd::engine::evaluate_function: "


def op(name: str, ts: float, dur: float, seq: int | None = None, tid: int = 1, cat: str = "cpu_op") -> dict[str, Any]:
    args: dict[str, Any] = {} if seq is None else {"Sequence number": seq}
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def step_events(t: float) -> list[dict[str, Any]]:
    """One step of 1000 us from ``t``: stem 40, blocks.0 200, blocks.1 200 (forward and backward), outside 60."""
    return [
        op("ProfilerStep#1", t, 1000, cat="user_annotation"),
        op(SPAN, t + 10, 500),  # the root: its own time is the 10 us op between its children
        op(SPAN + "stem", t + 20, 30), op("aten::addmm", t + 25, 20, seq=1),
        op(SPAN + "blocks.0", t + 60, 130), op(SPAN + "blocks.0.fc", t + 70, 110), op("aten::addmm", t + 80, 100, seq=2),
        op("aten::add", t + 195, 10, seq=3),  # the root's own op
        op(SPAN + "blocks.1", t + 210, 120), op(SPAN + "blocks.1.fc", t + 220, 105), op("aten::addmm", t + 225, 100,
                                                                                         seq=4),
        op("aten::nll_loss", t + 520, 30, seq=5),  # outside every module span: the loss
        op(BACKWARD + "NllLossBackward0", t + 560, 10, seq=5),
        op(BACKWARD + "AddmmBackward0", t + 580, 100, seq=4), op("aten::mm", t + 590, 80),  # 20 + 80: blocks.1.fc
        op(BACKWARD + "AddBackward0", t + 685, 5, seq=3),  # the root's
        op(BACKWARD + "AddmmBackward0", t + 700, 100, seq=2), op("aten::mm", t + 710, 80),  # blocks.0.fc
        op(BACKWARD + "AddmmBackward0", t + 810, 20, seq=1),  # stem
        op("aten::add_", t + 900, 15),  # the optimizer: outside
    ]


def write_trace(path: Path, events: list[dict[str, Any]], meta: dict[str, Any] | None = None, **top: Any) -> Path:
    doc: dict[str, Any] = {"traceEvents": events, "perf_callbacks_flops": {"flops_per_step": 800.0, "source": "counted"},
                           **top}
    if meta is not None:
        doc["perf_callbacks_modules"] = meta
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def modules_meta() -> dict[str, Any]:
    return {"spans": True, "note": "", "root": "TwoBlocks", "params": PARAMS, "flops": FLOPS, "flops_note": ""}


@pytest.fixture
def cpu_trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "rank0.pt.trace.json", step_events(0.0), modules_meta())


def rows_by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["module"]: r for r in rows}


def test_cpu_self_time_goes_to_the_innermost_module_forward_and_backward(cpu_trace: Path) -> None:
    rank = analyze(cpu_trace).ranks[0].modules

    own = {k: round(v, 6) for k, v in rank["time_us"].items()}
    # forward op + its backward evaluation (the evaluate_function op's self time and its children's)
    assert own == {"stem": 20 + 20, "blocks.0.fc": 100 + 100, "blocks.1.fc": 100 + 100, "": 10 + 5}
    assert rank["total_us"] == pytest.approx(20 + 100 + 10 + 100 + 30 + 10 + 100 + 5 + 100 + 20 + 15)


def test_rows_at_depth_one_group_indices_and_keep_each(cpu_trace: Path) -> None:
    result = analyze(cpu_trace)
    rows = result.modules
    total = 510.0

    assert [r["module"] for r in rows] == ["blocks.*", "blocks.0", "blocks.1", "stem", "(root)", OUTSIDE]
    by = rows_by_name(rows)
    assert by["blocks.*"]["members"] == 2 and by["blocks.0"]["group"] == "blocks.*"
    assert by["blocks.0"]["time_fraction"] == pytest.approx(200 / total)
    assert by["blocks.*"]["time_fraction"] == pytest.approx(400 / total)
    assert by["blocks.0"]["flops_fraction"] == pytest.approx(300 / 800)
    assert by["blocks.*"]["flops"] == 600 and by["blocks.*"]["params"] == 72
    assert by[OUTSIDE]["time_fraction"] == pytest.approx(55 / total)
    assert by[OUTSIDE]["flops_fraction"] == pytest.approx(100 / 800)  # 800 per step, 700 counted in modules


def test_deeper_rows_group_repeated_indices_inside_paths(cpu_trace: Path) -> None:
    result = analyze(cpu_trace)
    set_depth(result, 2)
    by = rows_by_name(result.modules)

    assert by["blocks.*.fc"]["members"] == 2
    assert by["blocks.1.fc"]["group"] == "blocks.*.fc"
    assert group_of("encoder.layers.11.attn") == "encoder.layers.*.attn"
    assert at_depth("encoder.layers.11.attn", 2) == "encoder.layers.11" and at_depth("", 2) == ""
    assert at_depth("0.fc", 1) == "0" and at_depth("0.1.fc", 1) == "0.1"  # a Sequential's own indices


def test_text_lines_read_as_shares_of_time_and_flops(cpu_trace: Path) -> None:
    text = format_text(analyze(cpu_trace))

    assert "  blocks.*: 78% of CPU op time, 75% of MFU-counted FLOPs, 2 x 36 params\n" in text
    assert "    blocks.0: 39% of CPU op time, 38% of MFU-counted FLOPs, 36 params\n" in text
    assert TURN_ON not in text


def test_device_time_goes_to_the_module_whose_span_held_the_launch(tmp_path: Path) -> None:
    events = [op("ProfilerStep#1", 0, 1000, cat="user_annotation"), op(SPAN + "blocks.0", 100, 100),
              op(SPAN + "blocks.1", 300, 100), op("aten::mm", 110, 50, seq=1), op("aten::mm", 310, 50, seq=2),
              op(BACKWARD + "MmBackward0", 600, 50, seq=2, tid=7)]  # the backward on autograd's own thread
    kernels = [(1, 115, 120, 300), (2, 315, 420, 100), (3, 610, 630, 50), (4, 700, 900, 50)]  # 4: no module
    for corr, launch, start, dur in kernels:
        tid = 7 if corr == 3 else 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid,
                       "ts": launch, "dur": 3, "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": 0, "tid": 7, "ts": start, "dur": dur,
                       "args": {"device": 0, "correlation": corr}})
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events, modules_meta()))
    by = rows_by_name(result.modules)

    assert by["blocks.0"]["time_us"] == 300 and by["blocks.1"]["time_us"] == 100 + 50
    assert by[OUTSIDE]["time_us"] == 50
    assert "blocks.*: 90% of device time" in format_text(result)


def test_without_spans_the_report_says_how_to_turn_them_on(tmp_path: Path) -> None:
    """A window perf-callbacks recorded (its machine metadata) says how to get module spans; another tool's trace,
    which has no such option, says nothing about them."""
    events = [e for e in step_events(0.0) if not e["name"].startswith(SPAN)]
    machine = {"cpu_cores": 2, "local_world_size": 1, "num_workers": 0, "cuda": False}
    result = analyze(write_trace(tmp_path / "ours" / "rank0.pt.trace.json", events, perf_callbacks_machine=machine))
    text = format_text(result)

    assert result.modules == []
    assert [line for line in text.splitlines() if "module_spans" in line] == [TURN_ON]
    assert "<h2>Modules</h2><p>modules: no module spans" in render_html(result)
    foreign = analyze(write_trace(tmp_path / "other" / "rank0.pt.trace.json", events))
    assert "module" not in format_text(foreign).lower() and "<h2>Modules</h2>" not in render_html(foreign)


def test_spans_asked_for_but_not_recorded_say_why(tmp_path: Path) -> None:
    meta = {**modules_meta(), "spans": False, "note": "the model is compiled (torch.compile): it runs no hooks"}
    events = [e for e in step_events(0.0) if not e["name"].startswith(SPAN)]
    text = format_text(analyze(write_trace(tmp_path / "rank0.pt.trace.json", events, meta)))

    assert "modules: no module spans recorded: the model is compiled" in text and TURN_ON not in text


def test_flops_not_counted_per_module_say_why(tmp_path: Path) -> None:
    meta = {**modules_meta(), "flops": None, "flops_note": "not counted per module: the FLOPs per step come from "
                                                           "flops_per_step (config)"}
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", step_events(0.0), meta))

    assert all(r["flops_fraction"] is None for r in result.modules)
    assert "  FLOPs by module: not counted per module: the FLOPs per step come from flops_per_step" in \
        format_text(result)


def test_cli_modules_depth_json_and_html(cpu_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "report.html"
    assert main(["report", str(cpu_trace), "--modules", "2", "--json", "--html", str(page)]) == 0
    data = json.loads(capsys.readouterr().out)

    assert {r["module"] for r in data["modules"]} >= {"blocks.*.fc", "blocks.0.fc", "blocks.1.fc", "stem"}
    assert "<td>&nbsp;&nbsp;blocks.0.fc</td>" in page.read_text()

"""MFU and the MFU gap by cause: from the FLOPs in a window trace's metadata to ``report``, the summary and ``diff``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, compare, format_diff, format_text, render_html
from perf_callbacks.analysis.compute.mfu import IDLE, META_KEY, flops_meta, mfu_gap, mfu_line, window_mfu
from perf_callbacks.analysis.results.result import AnalysisResult
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.flops import step as core_flops
from tests.core.engine_helpers import train_mlp

GAP = (*IDLE, "below_peak")


def test_the_analysis_reads_the_key_the_engine_writes() -> None:
    assert META_KEY == core_flops.META_KEY


def test_the_gap_sums_to_one_minus_mfu_and_names_each_idle_cause() -> None:
    known = {"flops_per_step": 6e12, "peak_tflops": 100.0, "source": "counted", "peak_source": "peak_tflops: 100"}
    losses = {"input": 0.12, "communication": 0.06, "host": 0.004}
    fields, notes = window_mfu([known], 150.0, losses)  # 6e12 FLOP in 0.15 s = 40 TFLOP/s
    assert fields["achieved_tflops"] == pytest.approx(40.0) and fields["mfu"] == pytest.approx(0.4)
    gap = fields["mfu_gap"]
    assert list(gap) == list(GAP) and sum(gap.values()) == pytest.approx(1 - fields["mfu"], abs=1e-12)
    assert gap["below_peak"] == pytest.approx(0.6 - 0.184) and gap["input"] == 0.12 and notes == []
    assert mfu_line(fields) == "MFU 40%: idle 18 pts (input 12, communication 6); busy but below peak 42 pts"


def test_busy_copy_time_is_not_idle() -> None:
    """Copies that overlapped no kernel kept the device busy: their points are copying, not idle."""
    known = {"flops_per_step": 6e12, "peak_tflops": 100.0}
    fields, _ = window_mfu([known], 150.0, {"input": 0.12, "copy": 0.2, "sync": 0.03})
    assert fields["mfu_gap"]["copy"] == pytest.approx(0.2)  # the JSON keeps its keys
    assert mfu_line(fields) == "MFU 40%: idle 15 pts (input 12, sync 3); busy copying 20 pts; busy but below peak " \
                               "25 pts"


def test_idle_beyond_one_minus_mfu_is_scaled_to_fit_with_a_note() -> None:
    gap, note = mfu_gap(0.5, {"input": 0.4, "sync": 0.2})
    assert sum(gap.values()) == pytest.approx(0.5) and gap["below_peak"] == 0.0
    assert gap["input"] == pytest.approx(0.5 * 0.4 / 0.6)
    assert note == "MFU 50.0% plus 60.0% idle exceeds 100%: flops_per_step or peak_tflops may be overstated"
    gap, note = mfu_gap(1.3, {"input": 0.1})
    assert sum(gap.values()) == 0.0 and note.startswith("MFU 130% is above 100%")


def test_without_a_peak_only_achieved_tflops_and_a_note() -> None:
    known = flops_meta({META_KEY: {"flops_per_step": 2e12, "peak_source": "no peak FLOP/s is known for CPUs: set "
                                   "peak_tflops"}})
    fields, notes = window_mfu([known], 100.0, {})
    assert fields["achieved_tflops"] == pytest.approx(20.0) and fields["mfu"] is None and fields["mfu_gap"] is None
    assert notes == ["MFU: not given: no peak FLOP/s is known for CPUs: set peak_tflops"]


def test_flops_not_measured_say_why_and_a_foreign_trace_says_nothing() -> None:
    known = flops_meta({META_KEY: {"flops_per_step": None, "note": "not measured (flops: false): set flops_per_step"}})
    fields, notes = window_mfu([known], 100.0, {})
    assert fields["flops_per_step"] is None and notes == [
        "MFU: FLOPs per step not measured (flops: false): set flops_per_step"]
    assert window_mfu([{}], 100.0, {}) == ({"flops_per_step": None, "achieved_tflops": None, "peak_tflops": None,
                                            "mfu": None, "mfu_gap": None, "flops_source": "", "peak_source": ""}, [])
    assert flops_meta({META_KEY: {"flops_per_step": True, "peak_tflops": -1}})["flops_per_step"] is None


def test_ranks_give_the_mean_of_their_flops_and_peaks_and_say_when_they_differ() -> None:
    """Two ranks counting 2e12 and 4e12 FLOPs a step on 100 and 200 TFLOP/s peaks: 3e12 on 150 (the mean, not the
    max), with a note; ranks that agree get none."""
    ranks = [{"flops_per_step": f, "peak_tflops": p, "source": "counted", "peak_source": "table"}
             for f, p in ((2e12, 100.0), (4e12, 200.0))]
    fields, notes = window_mfu(ranks, 100.0, {})
    assert (fields["flops_per_step"], fields["peak_tflops"]) == (3e12, 150.0)
    assert fields["achieved_tflops"] == pytest.approx(30.0) and fields["mfu"] == pytest.approx(0.2)
    assert notes == ["MFU: the ranks' FLOPs per step differ (2e+12 to 4e+12): their mean"]
    fields, notes = window_mfu([ranks[0], dict(ranks[0])], 100.0, {})
    assert fields["flops_per_step"] == 2e12 and notes == []


def run_windows(tmp_path: Path, summary: bool, **options: object) -> PerfEngine:
    """A real MLP on CPU through the engine: the FLOPs counted on step 0, then one 3-step window (4-6)."""
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 2, "wait": 1, "warmup": 1, "active": 3},
                                "summary": summary, **options})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=50))
    train_mlp(engine, 8, width=64, hidden=256, batch=32, attach=True)
    engine.close()
    return engine


def test_report_on_a_window_folder_gives_mfu_from_the_same_runs_numbers(tmp_path: Path) -> None:
    engine = run_windows(tmp_path, summary=False, peak_tflops=1.0)
    (trace,) = engine.exported
    result = analyze(trace.parent, sidecars=False)  # no sidecar: the FLOPs come from the trace itself
    assert result.efficiency.flops_per_step == engine.flops.per_step
    assert result.efficiency.peak_tflops == 1.0 and result.step_time_ms is not None
    expected = engine.flops.per_step / (result.step_time_ms / 1e3) / 1e12  # peak 1 TFLOP/s
    assert result.efficiency.mfu == pytest.approx(expected, rel=0.02)
    assert result.efficiency.achieved_tflops == pytest.approx(expected, rel=0.02)
    mfu = result.efficiency
    assert sum(mfu.mfu_gap.values()) == pytest.approx(1 - mfu.mfu, abs=1e-9)
    data = json.loads(json.dumps(result.to_dict()))
    assert set(data["mfu_gap"]) == set(GAP) and data["mfu"] == result.efficiency.mfu
    assert result.scalars()["perf/window/mfu"] == result.efficiency.mfu
    text = format_text(result)
    assert re.search(r"\nMFU [0-9.]+%: idle \d+ pts.*; busy but below peak \d+ pts\n", text)
    assert "FLOPs per step: " in text and "(counted with FlopCounterMode on step 0); achieved " in text
    page = render_html(result)
    assert re.search(r"<p>MFU [0-9.]+%: ", page) and "<p>FLOPs per step: " in page


def test_the_window_summary_and_sidecars_carry_the_mfu(tmp_path: Path) -> None:
    engine = run_windows(tmp_path, summary=True, peak_tflops=1.0)
    (trace,) = engine.exported
    summary = (trace.parent / "summary.txt").read_text()
    assert "\nMFU " in summary and "FLOPs per step: " in summary
    from_sidecars = analyze(tmp_path / "run")
    parsed = analyze(tmp_path / "run", sidecars=False)
    assert from_sidecars.efficiency.mfu == parsed.efficiency.mfu is not None
    assert from_sidecars.efficiency.mfu_gap == parsed.efficiency.mfu_gap


def test_without_peak_on_cpu_the_report_gives_achieved_tflops_and_why_no_mfu(tmp_path: Path) -> None:
    engine = run_windows(tmp_path, summary=False)
    result = analyze(engine.exported[0].parent)
    assert result.efficiency.mfu is None and result.efficiency.achieved_tflops is not None
    assert "MFU: not given: no peak FLOP/s is known for CPUs: set peak_tflops" in result.notes
    lines = format_text(result).splitlines()
    assert "note: MFU: not given: no peak FLOP/s is known for CPUs: set peak_tflops" in lines
    assert not any(line.startswith("MFU ") for line in lines)
    assert any(line.startswith("FLOPs per step: ") and " TFLOP/s" in line and "peak" not in line for line in lines)


def _with_mfu(path: str, ms: float, mfu: float, gap: dict[str, float]) -> AnalysisResult:
    from perf_callbacks.analysis.results.result import RankResult, StepResult

    steps = [StepResult(i, ms + i % 3 * 0.1, {"compute": ms}) for i in range(8)]
    rank = RankResult(0, path, 1.0, None, None, ms, 0.0, {}, steps, {}, {}, [], [], None, [], {}, None)
    result = AnalysisResult(path, "compute_bound", None, 0.0, ms, [], [], [rank])
    result.efficiency.mfu, result.efficiency.mfu_gap = mfu, {k: gap.get(k, 0.0) for k in GAP}
    return result


def test_diff_compares_the_mfu_and_each_part_of_the_gap() -> None:
    base = _with_mfu("a", 10.0, 0.30, {"input": 0.30, "below_peak": 0.40})
    new = _with_mfu("b", 8.0, 0.45, {"input": 0.10, "communication": 0.05, "below_peak": 0.40})
    d = compare(base, new)
    assert d.mfu["change"] == pytest.approx(0.15)
    assert d.mfu_gap["input"]["change"] == pytest.approx(-0.2) and d.mfu_gap["communication"]["base"] == 0.0
    assert json.loads(json.dumps(d.to_dict()))["mfu_gap"]["below_peak"]["change"] == pytest.approx(0.0)
    text = format_diff(d)
    assert "MFU                         30.0%        45.0%   +15.0 pts" in text
    assert "  input                        30.0 ->       10.0   -20.0" in text
    plain = compare(_with_mfu("a", 10.0, 0.3, {}), _with_mfu("b", 8.0, 0.3, {}))
    plain.mfu, plain.mfu_gap = {}, {}
    assert "MFU" not in format_diff(plain)

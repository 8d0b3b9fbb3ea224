"""``compare`` and ``diff_paths`` on the real H200 fixture traces and real gloo traces (the noise statistics: test_noise.py)."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.diff.compare import compare
from perf_callbacks.analysis.diff.text import format_diff
from perf_callbacks.analysis.html.diff_page import render_diff_html
from perf_callbacks.analysis.results.result import StepResult
from perf_callbacks.analysis.windows.diff_sides import diff_paths, load_side
from perf_callbacks.cli import main
from tests.analysis.conftest import fixture_trace


@pytest.fixture(scope="module")
def compute_vs_input():  # type: ignore[no-untyped-def]
    return diff_paths(fixture_trace("compute_bound"), fixture_trace("input_bound"), parallel=False)


def test_compute_bound_against_input_bound_changes_the_verdict(compute_vs_input) -> None:  # type: ignore[no-untyped-def]
    d = compute_vs_input
    assert d.verdict == {"base": "compute_bound", "new": "input_bound"}
    assert any("num_workers" in t for t in d.recommendations["added"])
    assert any(t.startswith("compute-bound") for t in d.recommendations["removed"])
    text = format_diff(d).splitlines()
    assert text[4] == "verdict: compute_bound -> input_bound"
    assert text[5] == "new recommendations:" and "num_workers" in text[6]


def test_compute_bound_against_input_bound_every_figure_moves_the_right_way(compute_vs_input) -> None:  # type: ignore[no-untyped-def]
    d = compute_vs_input
    st = d.step_time_ms
    assert st["new"] > st["base"] and st["change"] == pytest.approx(st["new"] - st["base"]) and st["change"] > 0
    assert st["significant"] and d.regression and d.outcome == "regression"
    assert d.gpu_utilization["change"] < -0.9  # 99.3% -> 0.1% (fixtures README)
    assert d.data_wait_fraction["change"] > 0.9
    assert d.peak_memory_bytes["change"] < 0  # the transformer holds far more memory than the MLP
    assert d.causes["input"]["change"] > 500 and d.causes["compute"]["change"] < -100
    # a step's causes are its own time: the last step's device tail (work still queued when its host span ended) is not
    # counted (it put compute_bound's compute at 340 ms a step, against steps of 146 ms)
    assert d.base_result is not None
    steps = [s.time_ms for r in d.base_result.ranks for s in r.steps]
    assert sum(c["base"] for c in d.causes.values()) == pytest.approx(sum(steps) / len(steps), rel=0.02)
    assert d.contributors[0] == {"kind": "cause", "name": "input", "change_ms": d.causes["input"]["change"]}
    mm = next(o for o in d.ops["matched"] if o["name"] == "aten::mm")
    assert mm["change_ms"] < 0 and mm["new"]["count"] < mm["base"]["count"]
    assert mm["base"]["per_call_ms"] == pytest.approx(mm["base"]["total_ms"] / mm["base"]["count"])
    assert {o["name"] for o in d.ops["removed"]} >= {"aten::_cudnn_attention_backward"}
    assert all(o["change_ms"] < 0 for o in d.ops["removed"]) and all(o["change_ms"] > 0 for o in d.ops["added"])
    assert d.summary.startswith("step time +289.")
    assert "significant regression): input +558.2 ms/step (input-bound now)" in d.summary


def test_a_trace_against_itself_changes_nothing() -> None:
    d = diff_paths(fixture_trace("sync_bound"), fixture_trace("sync_bound"))
    assert d.step_time_ms["change"] == 0 and not d.step_time_ms["significant"] and not d.regression
    assert d.outcome == "within noise" and d.verdict == {"base": "sync_bound", "new": "sync_bound"}
    for key in ("gpu_utilization", "data_wait_fraction", "peak_memory_bytes"):
        assert getattr(d, key)["change"] == 0
    assert all(v["change"] == 0 for v in d.causes.values())
    assert d.ops["matched"] and all(o["change_ms"] == 0 for o in d.ops["matched"])
    assert d.ops["added"] == [] and d.ops["removed"] == [] and d.recommendations == {"added": [], "removed": []}
    assert d.summary == "step time +0.0% (47.0 -> 47.0 ms/step, within noise): aten::mm unchanged"


def test_json_contract_keys(compute_vs_input) -> None:  # type: ignore[no-untyped-def]
    out = json.loads(json.dumps(compute_vs_input.to_dict()))
    assert {"base", "new", "step_time_ms", "gpu_utilization", "data_wait_fraction", "peak_memory_bytes", "causes",
            "ops", "verdict", "regression", "summary"} <= set(out)
    assert {"base", "new", "change", "significant"} <= set(out["step_time_ms"])
    for key in ("gpu_utilization", "data_wait_fraction", "peak_memory_bytes"):
        assert set(out[key]) == {"base", "new", "change"}
    assert set(out["causes"]["input"]) == {"base", "new", "change"}
    assert set(out["ops"]) == {"matched", "added", "removed"} and set(out["verdict"]) == {"base", "new"}
    assert out["base"]["path"].endswith("compute_bound.pt.trace.json.gz") and out["new"]["complete"] is True


def test_html_has_both_sides_step_bars_and_op_deltas(compute_vs_input) -> None:  # type: ignore[no-untyped-def]
    page = render_diff_html(compute_vs_input)
    assert page.startswith("<!DOCTYPE html>") and "http" not in page and "<script" not in page
    assert page.count("<rect") > 6 and "base: input 558.16 ms" not in page and "new: input 558.16 ms" in page
    assert "rank 0: base | new, step by step" in page and "#4 " in page
    assert "aten::mm" in page and "-56.458" in page and 'class="summary regression"' in page


def test_several_ranks_per_rank_deltas_and_straggler_change(gloo_window: Path) -> None:
    base = analyze(gloo_window)
    same = compare(base, base)
    assert [r["rank"] for r in same.ranks] == [0, 1]
    steps = {s.step for s in base.ranks[0].steps}
    assert same.base["n_steps"] == len(steps) == len({s.step for s in base.ranks[1].steps})  # steps, not rank-steps
    assert f"over {len(steps)} and {len(steps)} steps of each rank" in format_diff(same)
    assert "different ranks" not in format_diff(same)
    one = copy.deepcopy(base)
    one.ranks = one.ranks[1:]  # only rank 1 traced on the new side
    assert "note: the two sides hold different ranks (base [0, 1], new [1])" in format_diff(compare(base, one))
    assert same.stragglers == {"base": base.stragglers, "new": base.stragglers, "changed": False}
    new = copy.deepcopy(base)
    new.ranks[1].steps = [StepResult(s.step, s.time_ms + 500.0, s.causes_ms) for s in new.ranks[1].steps]
    new.stragglers = [] if base.stragglers else [1]
    d = compare(base, new)
    assert d.stragglers["changed"] and d.ranks[1]["significant"] and d.ranks[1]["change"] == pytest.approx(500.0)
    assert d.ranks[0]["change"] == 0 and not d.ranks[0]["significant"]
    assert f"stragglers: {base.stragglers or 'none'} -> {new.stragglers or 'none'} (changed)" in format_diff(d)


def test_latest_complete_window_is_the_default_and_window_picks_others(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for name, trace in (("window-000004-000006", "sync_bound"), ("window-000004-000009", "launch_bound_tiny_kernels")):
        (run / name).mkdir(parents=True)
        shutil.copy(fixture_trace(trace), run / name / "rank0.pt.trace.json.gz")
    os.utime(run / "window-000004-000006" / "rank0.pt.trace.json.gz", (1e9, 1e9))  # older; the newer one is cut short
    result, info = load_side(tmp_path)
    assert result.verdict == "sync_bound" and info["window_index"] == 1 and info["complete"] and info["windows"] == 2
    assert load_side(tmp_path, "0")[0].verdict == "host_bound"
    assert load_side(tmp_path, "window-000004-000006")[0].verdict == "sync_bound"
    with pytest.raises(ValueError, match="0: window-000004-000009, 1: window-000004-000006"):
        load_side(tmp_path, "window-9")


def test_cli_diff_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sync, launch = str(fixture_trace("sync_bound")), str(fixture_trace("launch_bound_tiny_kernels"))
    assert main(["diff", launch, sync, "--fail-on-regression", "0"]) == 0  # 47.3 -> 47.0 ms: within noise
    assert main(["diff", str(tmp_path / "missing"), sync]) == 2
    assert "no trace file or folder" in capsys.readouterr().err
    truncated = tmp_path / "truncated.pt.trace.json.gz"
    truncated.write_bytes(fixture_trace("sync_bound").read_bytes()[:30000])
    assert main(["diff", str(truncated), sync]) == 2
    err = capsys.readouterr().err
    assert str(truncated) in err and "truncated file" in err and err.count("\n") == 1  # one line: the file and why
    assert main(["diff", sync, sync, "--window", "3"]) == 2
    assert main(["diff", sync, sync, "--window", "0", "--window", "0", "--window", "0"]) == 2
    html = tmp_path / "d.html"
    compute = str(fixture_trace("compute_bound"))
    code = main(["diff", sync, compute, "--json", "--html", str(html), "--fail-on-regression", "5"])
    out = json.loads(capsys.readouterr().out)
    assert out["regression"] and out["step_time_ms"]["change_pct"] > 5 and code == 1
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert main(["diff", sync, compute, "--fail-on-regression", "10000"]) == 0
    assert main(["diff", compute, sync, "--fail-on-regression", "5"]) == 0  # an improvement never fails


def test_parallel_analysis_in_a_child_process_gives_the_same_result(tmp_path: Path) -> None:
    sync, launch = fixture_trace("sync_bound"), fixture_trace("launch_bound_tiny_kernels")
    together = diff_paths(sync, launch, parallel=True).to_dict()
    assert together == diff_paths(sync, launch, parallel=False).to_dict()
    assert together["new"]["path"] == str(launch) and together["verdict"] == {"base": "sync_bound", "new": "host_bound"}
    with pytest.raises(FileNotFoundError, match="no trace file or folder"):
        diff_paths(sync, tmp_path / "missing", parallel=True)
    with pytest.raises(ValueError, match="no window '9'"):
        diff_paths(sync, launch, new_window="9", parallel=True)


def test_advice_is_matched_by_its_cause_not_its_words() -> None:
    """The same cause reworded between runs is the same advice; a new cause is added, a cause gone is removed."""
    from perf_callbacks.analysis.diff.compare import _recommendations
    from perf_callbacks.analysis.results.recommendation import Recommendation

    base = [Recommendation("data wait 41%: raise num_workers to 4", "input"),
            Recommendation("remove .item() from the step", "sync")]
    new = [Recommendation("data wait 12%: raise num_workers to 8 and set prefetch_factor=4", "input"),
           Recommendation("fp32 matrix math without tensor cores: use TF32", "precision")]
    assert _recommendations(base, new) == {"added": ["fp32 matrix math without tensor cores: use TF32"],
                                           "removed": ["remove .item() from the step"]}
    from_json = [r.to_dict() for r in new]  # read back from a sidecar: the cause is in the JSON
    assert _recommendations(base, from_json)["added"] == ["fp32 matrix math without tensor cores: use TF32"]

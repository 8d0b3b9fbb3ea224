"""A gain on every recommendation: on the four H200 traces each one has its gain (or says why not) and its basis, the
gains equal the device idle per step counted here from the raw events, the list is ranked by them, and the JSON, the
sidecar, the text, the HTML and the console line carry them; the straggler and MFU gains; ``diff``'s estimate check."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median
from typing import Any

import pytest

from perf_callbacks.analysis import analyze, compare, format_diff, format_text, render_html
from perf_callbacks.analysis.diff.gains import check_one, estimate_lines
from perf_callbacks.analysis.judge.gains import rank_by_gain, step_gain
from perf_callbacks.analysis.judge.noise import compare_samples
from perf_callbacks.analysis.render.console import console_parts
from perf_callbacks.analysis.results.recommendation import Recommendation
from perf_callbacks.analysis.sidecar import write_sidecar
from tests.analysis.conftest import DEVICE_CATS, fixture_trace, load_doc, save_doc
from tests.analysis.rank_traces import write_ranks
from tests.analysis.synthetic_results import rank as synthetic_rank

NAMES = ("compute_bound", "input_bound", "launch_bound_tiny_kernels", "sync_bound")
IDLE = ("input", "sync", "host", "other")
KEYS = ["cause", "text", "estimated_gain_ms", "estimated_gain_fraction", "basis"]
FIRST = {"input_bound": ("input", 0.99), "launch_bound_tiny_kernels": ("host", 0.91),
         "sync_bound": ("precision", 0.61)}  # its fp32 GEMMs at TF32 (-61%) before its syncs (-29%)


@pytest.fixture(scope="module")
def results():  # type: ignore[no-untyped-def]
    return {name: analyze(fixture_trace(name), sidecars=False) for name in NAMES}


def idle_per_step(events: list[dict[str, Any]], device: int = 0) -> list[float]:
    """Each ProfilerStep's length less the union of its device intervals, in ms: counted without the package."""
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    ops = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                 if e.get("cat") in DEVICE_CATS and e.get("args", {}).get("device") == device)
    out = []
    for lo, hi in steps:
        busy, covered = 0.0, lo
        for a, b in ops:
            a, b = max(a, covered), min(b, hi)
            if b > a:
                busy, covered = busy + b - a, b
        out.append((hi - lo - busy) / 1e3)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_every_recommendation_has_a_gain_or_says_why_not_and_a_basis(results, name: str) -> None:  # type: ignore[no-untyped-def]
    r = results[name]
    step = r.ranks[0].step_time_ms
    for rec in r.recommendations:
        assert rec.basis, rec
        if rec.cause in r.ranks[0].losses:  # a loss's advice: a measured gain, an upper bound
            assert rec.estimated_gain_ms is not None and rec.estimated_gain_fraction is not None, rec.to_dict()
            assert "upper bound" in rec.basis and "median over 3 steps" in rec.basis, rec.basis
            assert rec.estimated_gain_fraction == pytest.approx(rec.estimated_gain_ms / step)
        elif rec.cause == "precision":  # the precision hint: the kernels at the new roofline bound, an upper bound
            assert rec.estimated_gain_ms is not None and rec.estimated_gain_fraction is not None, rec.to_dict()
            assert rec.estimated_gain_ms == pytest.approx(r.measures.precision["estimated_gain_ms"])
        else:  # the compute advice without an MFU, a caveat, a note on memory: no gain, and the basis says why
            assert rec.estimated_gain_ms is None and rec.estimated_gain_fraction is None, rec.to_dict()
            assert rec.basis.startswith("no gain"), rec.basis
    if name in FIRST:
        cause, fraction = FIRST[name]
        assert r.recommendations[0].cause == cause
        assert r.recommendations[0].estimated_gain_fraction == pytest.approx(fraction, abs=0.01)


@pytest.mark.parametrize("name", NAMES)
def test_the_gains_add_up_to_the_device_idle_per_step_counted_from_the_raw_events(results, name: str) -> None:  # type: ignore[no-untyped-def]
    """Each idle cause's gain is its time in a step; together they are all the idle of a step, which is counted here
    from the trace's events (step length less the union of device intervals), not from the package's timeline."""
    rank = results[name].ranks[0]
    idle = median(idle_per_step(load_doc(name)["traceEvents"]))
    gains = [step_gain(rank, cause)[0] for cause in IDLE]
    assert sum(g or 0.0 for g in gains) == pytest.approx(idle, rel=0.01, abs=0.01)
    for rec in results[name].recommendations:  # and each recommendation's gain is its cause's
        if rec.cause in IDLE:
            assert rec.estimated_gain_ms == pytest.approx(gains[IDLE.index(rec.cause)])


def test_the_list_is_ranked_by_gain(results) -> None:  # type: ignore[no-untyped-def]
    host = results["launch_bound_tiny_kernels"].recommendations
    assert [x.cause for x in host] == ["host", "profiler", "sync", "memory"]  # the caveat follows the verdict's
    fractions = [x.estimated_gain_fraction for x in host if x.estimated_gain_fraction is not None]
    assert fractions == sorted(fractions, reverse=True) and len(fractions) == 2
    # a larger gain outranks a larger loss share of the window, and one without a gain comes after the gained ones
    recs = [Recommendation("a", "other", 1.0, 0.05, "x"), Recommendation("b", "straggler", None, None, "no gain"),
            Recommendation("c", "sync", 3.0, 0.15, "x"), "plain words", Recommendation("d", "memory", None, None, "")]
    ranked = rank_by_gain(recs, "other")
    assert [str(x) for x in ranked] == ["c", "a", "b", "plain words", "d"]
    assert ranked[3].basis.startswith("no measurement backs a gain")


def test_json_sidecar_text_html_and_console_carry_the_gains(tmp_path: Path, results) -> None:  # type: ignore[no-untyped-def]
    r = results["sync_bound"]
    recs = json.loads(json.dumps(r.to_dict()))["recommendations"]
    assert [list(x) for x in recs] == [KEYS] * len(recs)
    assert [x["cause"] for x in recs[:2]] == ["precision", "sync"]
    assert recs[1]["estimated_gain_ms"] == pytest.approx(13.79, abs=0.01)
    rank_recs = json.loads(json.dumps(r.ranks[0].to_dict()))["recommendations"]  # the rank's own: no window hint
    assert rank_recs == [x for x in recs if x["cause"] != "precision"]
    trace = save_doc(tmp_path / "rank0.pt.trace.json.gz", load_doc("sync_bound"))
    write_sidecar(trace)
    again = analyze(trace)  # from the sidecar (format 7): the same recommendations, gains and all
    assert again.ranks[0].span_ms == r.ranks[0].span_ms and again.to_dict()["recommendations"] == recs
    text = format_text(r)
    assert "  1. [up to -61% step time (-28.8 ms/step)] fp32 matrix math without tensor cores" in text
    assert "  2. [up to -29% step time (-13.8 ms/step)] the device went idle right after blocking calls" in text
    assert "  3. [note] record_shapes=True was on" in text
    assert "<th>estimated gain</th>" in render_html(r) and "up to -29% step time (-13.8 ms/step)" in render_html(r)
    assert console_parts(r)["action"] == "remove aten::item from the step: up to -29% step time"
    assert console_parts(results["compute_bound"])["action"] == "bf16/TF32, torch.compile, fused kernels"  # no gain


def test_the_compute_advice_gains_the_mfu_gaps_busy_below_peak_share(tmp_path: Path) -> None:
    doc = load_doc("compute_bound")
    doc["perf_callbacks_flops"] = {"flops_per_step": 50e12, "peak_tflops": 989.0, "dtype": "bfloat16"}
    result = analyze(save_doc(tmp_path / "rank0.pt.trace.json.gz", doc), sidecars=False)
    (compute,) = [x for x in result.recommendations if x.cause == "compute"]
    mfu, gap = result.efficiency.mfu, result.efficiency.mfu_gap
    assert mfu is not None and gap is not None and result.step_time_ms is not None
    busy_beyond_peak = 1.0 - mfu - sum(v for k, v in gap.items() if k != "below_peak")
    assert compute.estimated_gain_fraction == pytest.approx(busy_beyond_peak)
    assert compute.estimated_gain_ms == pytest.approx(busy_beyond_peak * result.step_time_ms)
    assert "upper bound" in compute.basis and "bfloat16 peak" in compute.basis
    assert result.recommendations[0] is compute


def test_a_straggler_gains_its_lateness_and_the_collectives_only_what_is_left(tmp_path: Path) -> None:
    result = analyze(write_ranks(tmp_path / "window-000010-000017", [[1.0] * 8, [21.0] * 8]))
    assert result.stragglers == [1]
    late, comm = result.recommendations[0], next(x for x in result.recommendations if x.cause == "communication")
    assert late.cause == "straggler" and late.estimated_gain_ms == pytest.approx(20.0, abs=0.5)
    exposed = median(s.causes_ms["communication"] for s in result.ranks[0].steps)  # rank 0 waits in its collectives
    assert exposed > 19.0 and comm.estimated_gain_ms == pytest.approx(exposed - late.estimated_gain_ms, abs=1e-6)
    assert "less the straggler's lateness" in comm.basis


def test_the_cpu_contention_gain_is_its_share_of_the_window_times_the_median_step() -> None:
    """The run-queue wait is not in the steps' causes: its gain is the window's share times the median step time."""
    r = synthetic_rank(0, [40.0, 50.0, 70.0])
    r.losses["cpu_contention"] = 0.3
    ms, fraction, basis = step_gain(r, "cpu_contention")
    assert ms == pytest.approx(15.0) and fraction == pytest.approx(0.3), basis
    assert "its share of the window times the median step time" in basis


@pytest.mark.parametrize(("new", "outcome"), [
    ([36.0, 36.2, 35.9, 36.1, 36.3], "within the estimate"),
    ([35.5, 35.7, 35.4, 35.6, 35.8], "within the estimate"),  # 14.5 ms: above 14, inside the noise band (1.1 ms)
    ([34.8, 35.0, 34.7, 34.9, 35.1], "beyond the estimate"),  # 15.2 ms: above 14 + 1.1
    ([26.0, 26.2, 25.9, 26.1, 26.3], "beyond the estimate"),
    ([50.3, 49.9, 50.0, 50.4, 50.1], "within noise"),
    ([60.0, 60.2, 59.9, 60.1, 60.3], "slower"),
])
def test_diff_checks_the_estimate_against_the_delivered_step_time(new: list[float], outcome: str) -> None:
    step = compare_samples([50.0, 50.5, 49.8, 50.2, 50.1], new)
    row = check_one(Recommendation("remove .item()", "sync", 14.0, 0.28, "upper bound"), step, None)
    assert row["outcome"] == outcome, row
    assert row["delivered_ms"] == pytest.approx(50.1 - median(new))


def test_a_faster_step_whose_own_cause_did_not_move_is_not_rated_against_the_estimate() -> None:
    """The issue's case: num_workers raised on in-memory data, the data wait did not move, the machine got quieter."""
    step = compare_samples([50.0, 50.5, 49.8, 50.2, 50.1], [20.0, 20.2, 19.9, 20.1, 20.3])
    row = check_one(Recommendation("raise num_workers to 4", "input", 8.7, 0.17, "upper bound"), step, -0.4)
    assert row["outcome"] == "cause did not move" and row["delivered_ms"] == pytest.approx(30.0)
    row["elsewhere"] = {"cause": "compute", "change_ms": -29.6}
    [_, line] = estimate_lines([row])
    assert line.endswith("; input -0.4 ms/step; the time went to compute -29.6 ms/step: cause did not move")
    assert "of the estimate" not in line


def test_diff_of_a_window_with_itself_delivers_nothing(results) -> None:  # type: ignore[no-untyped-def]
    d = compare(results["sync_bound"], results["sync_bound"])
    assert [row["cause"] for row in d.estimates] == ["precision", "sync"]
    assert all(row["outcome"] == "within noise" and row["delivered_ms"] == 0.0 for row in d.estimates)
    assert "2. sync (the device went idle right after blocking calls returned, 26% of th...): estimated up to " \
           "-29% step time (-13.8 ms/step); delivered +0.0 ms/step, +0% (noise band" in format_diff(d)

"""Real 2-rank gloo CPU traces: the slowed rank is the straggler, a healthy run has none; CPU-only results work end to
end. The machine may be loaded: both runs have 20 steps, so that a few stalled steps, or lateness that takes turns,
cannot decide (see ``test_stragglers.py`` for the same rule on deterministic traces)."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

import pytest

from perf_callbacks.analysis import analyze, format_text
from perf_callbacks.analysis.judge.cluster import lateness_per_step
from perf_callbacks.cli import main
from tests.analysis.gloo_traces import SLEEP_S, SLOW_RANK

pytestmark = pytest.mark.multiprocess


def test_slowed_rank_is_the_straggler(gloo_window: Path) -> None:
    result = analyze(gloo_window)
    assert [r.rank for r in result.ranks] == [0, 1]
    assert result.stragglers == [SLOW_RANK]
    assert "no profiled op explains it" in result.straggler_reasons[SLOW_RANK]  # a time.sleep: untraced host time
    assert "of 40 collectives late" in result.straggler_reasons[SLOW_RANK]  # 2 all_reduces in each of 20 steps
    per_step, by_step = lateness_per_step(result.ranks)
    assert by_step and median(per_step[SLOW_RANK]) > 0.5 * SLEEP_S * 1e3  # the sleep, less the fast rank's own delays
    assert result.recommendations[0].startswith(f"rank {SLOW_RANK} reaches")
    assert result.imbalance_ratio is not None
    assert result.imbalance_ratio > 1.2
    fast = result.ranks[1 - SLOW_RANK]
    waits = [s.causes_ms["communication"] for s in fast.steps]  # the fast rank waits inside all_reduce, each step
    assert median(waits) > 0.5 * SLEEP_S * 1e3, waits  # (its share of the window, a mean, fell to 0.29 under load)
    c = result.culprit  # by arrival order too: last at every step, by about the sleep, in no traced phase
    assert c is not None and (c["rank"], c["phase"], c["steps"]) == (SLOW_RANK, None, [2, 21])
    assert c["wait_ms_each"] > 0.5 * SLEEP_S * 1e3


def test_healthy_ranks_name_no_straggler(gloo_healthy_window: Path) -> None:
    result = analyze(gloo_healthy_window)
    assert [len(r.steps) for r in result.ranks] == [20, 20]
    assert result.stragglers == [], result.straggler_reasons
    assert result.culprit is None, result.culprit
    assert not any(r.startswith("rank ") and "late" in r for r in result.recommendations)


def test_cpu_only_results(gloo_window: Path) -> None:
    result = analyze(gloo_window)
    assert result.gpu_utilization is None
    # the data wait is the in-memory loader's own fetches, as the trace times them (whatever the machine's load)
    assert result.data_wait_fraction == pytest.approx(_loader_share(gloo_window), rel=1e-6)
    assert result.data_wait_fraction > 0
    assert {r.data_loader for r in result.ranks} == {"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"}
    assert result.top_ops[0]["device"] == "cpu"
    assert any(op["name"].startswith("aten::") for op in result.top_ops)
    assert "perf/window/gpu_utilization" not in result.scalars()
    assert "stragglers: [1]" in format_text(result)


def test_cli_json(gloo_window: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(gloo_window), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    keys = {"verdict", "gpu_utilization", "data_wait_fraction", "top_ops", "ranks", "stragglers", "recommendations"}
    assert keys <= out.keys()
    assert out["stragglers"] == [SLOW_RANK]
    assert out["gpu_utilization"] is None


def _loader_share(window: Path) -> float:
    """Mean over the ranks of the time in ``DataLoader.__next__`` spans within the profiled steps, per step time."""
    shares = []
    for trace in sorted(window.glob("rank*.pt.trace.json")):
        events = json.loads(trace.read_text())["traceEvents"]
        steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
        lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
        fetches = [e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("enumerate(DataLoader)#")]
        assert len(fetches) >= len(steps)
        shares.append(sum(max(0.0, min(e["ts"] + e["dur"], hi) - max(e["ts"], lo)) for e in fetches) / (hi - lo))
    return sum(shares) / len(shares)

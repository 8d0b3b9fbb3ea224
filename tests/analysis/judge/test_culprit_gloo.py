"""The culprit on real gloo DDP runs: rank 1 sleeps 30 ms a step in backward (the case a comparison of wall times
misses: the others wait inside their own backward), in data loading or in the optimizer step; the culprit and its
phase are named with the recurrence, and healthy windows name none. 2 and 4 processes."""

from __future__ import annotations

from html import escape
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, format_text, render_html
from tests.analysis.gloo_culprit_traces import ACTIVE, PHASES, SLEEP_S, SLOW_RANK, write_traces

pytestmark = pytest.mark.multiprocess
STEPS = [2, 2 + ACTIVE - 1]
"""The profiled steps (the schedule waits one step and warms up one)."""


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One 2-rank run: a window per delayed phase, and two healthy windows."""
    out = tmp_path_factory.mktemp("culprit2")
    found = write_traces(out / "a", (*PHASES, ""))
    found["healthy-2"] = write_traces(out / "b", ("",))[""]
    return found


@pytest.mark.parametrize("phase", PHASES)
def test_the_rank_delayed_in_one_phase_is_named_with_that_phase_and_its_recurrence(two_ranks: dict[str, Path],
                                                                                    phase: str) -> None:
    result = analyze(two_ranks[phase])
    c = result.culprit
    assert c is not None, format_text(result)
    assert (c["rank"], c["phase"]) == (SLOW_RANK, phase)
    assert c["steps"] == STEPS and c["last_share"] >= 0.9 and c["collectives"] >= ACTIVE - 1
    assert 0.5 * SLEEP_S * 1e3 <= c["wait_ms_each"] <= 2 * SLEEP_S * 1e3
    assert c["phase_excess_ms"] >= 0.8 * SLEEP_S * 1e3
    assert f"culprit (arrival order): rank 1 last in {c['last_share']:.0%}" in format_text(result)
    assert f"its {phase} takes" in format_text(result)
    assert result.to_dict()["culprit"] == c
    page = render_html(result)
    assert escape(f"culprit (arrival order): {c['text']}") in page


def test_a_rank_slow_in_backward_shows_no_longer_backward_wall_time(two_ranks: dict[str, Path]) -> None:
    """Why arrival order: rank 0 waits for rank 1's gradient bucket inside its own backward, so the wall time of
    backward is about the same on both ranks; only the time outside collectives tells them apart."""
    result = analyze(two_ranks["backward"])
    wall = {r.rank: r.step_time_ms or 0.0 for r in result.ranks}
    assert abs(wall[0] - wall[1]) < 0.25 * SLEEP_S * 1e3
    own = {r.rank: r.arrivals["phases"]["backward"] for r in result.ranks}
    assert own[1] - own[0] >= 0.8 * SLEEP_S * 1e3


def test_the_run_page_names_each_windows_culprit_and_phase(two_ranks: dict[str, Path]) -> None:
    run = two_ranks[""].parent.parent  # the run: one window per phase and a healthy one
    result = analyze(run)
    assert len(result.windows) == len(PHASES) + 1
    page = render_html(result)
    for phase in PHASES:
        assert f"<td>rank 1, {phase}: last in " in page
    assert page.count("<td>none</td></tr>") >= 1  # the healthy window's culprit cell (its stragglers cell precedes)


@pytest.mark.parametrize("window", ["", "healthy-2"])
def test_healthy_windows_name_no_culprit(two_ranks: dict[str, Path], window: str) -> None:
    result = analyze(two_ranks[window])
    assert all(r.load["run_queue_ms"] is not None for r in result.ranks)  # the rule could discount a CPU wait
    assert result.culprit is None, result.culprit
    assert "culprit (arrival order): none" in format_text(result)


@pytest.mark.slow
def test_four_ranks_name_the_one_slow_in_backward(tmp_path: Path) -> None:
    found = write_traces(tmp_path, ("backward", ""), world=4)
    slow, healthy = analyze(found["backward"]), analyze(found[""])
    assert len(slow.ranks) == 4
    assert slow.culprit is not None and (slow.culprit["rank"], slow.culprit["phase"]) == (SLOW_RANK, "backward")
    assert healthy.culprit is None, healthy.culprit

"""Stragglers on deterministic 2-rank traces: named only beyond the noise, with the right cause; our own gather is not a
collective. The noise patterns are those of healthy gloo runs on a loaded machine (one slow step, lateness that takes
turns, a few ms of jitter on every step)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, format_text
from tests.analysis.rank_traces import write_ranks

JITTER = [[0.7, 4.2, 3.8, 1.1, 2.9, 0.2, 4.6, 2.4], [1.3, 2.5, 2.2, 3.9, 0.4, 4.4, 1.8, 3.1]]
"""Per rank and step, ms of untraced host time: a few ms of noise, now on one rank, now on the other."""


@pytest.mark.parametrize("extra_ms", [
    pytest.param([[0.0, 0.0, 0.0], [0.0, 15.0, 0.0]], id="one-slow-step"),  # the 14.8 ms hiccup of a loaded machine
    pytest.param([[0.0, 0.0, 2.5], [4.1, 3.2, 1.0]], id="taking-turns"),  # late 2 steps in 3, the other rank once
    pytest.param([row[:3] for row in JITTER], id="jitter-3-steps"),
    pytest.param([JITTER[0], JITTER[1][:3] + [15.0] + JITTER[1][4:]], id="jitter-and-a-hiccup-8-steps"),
])
def test_healthy_noisy_ranks_name_no_straggler(tmp_path: Path, extra_ms: list[list[float]]) -> None:
    result = analyze(write_ranks(tmp_path / "window-000010-000020", extra_ms))
    assert result.stragglers == [], result.straggler_reasons
    assert "stragglers: none" in format_text(result)
    assert result.culprit is None, result.culprit  # nor a culprit by arrival order


@pytest.mark.parametrize("steps", [3, 8])
def test_a_rank_slowed_by_20_ms_a_step_is_named_with_untraced_host_time(tmp_path: Path, steps: int) -> None:
    slowed = [[x + 20.0 for x in JITTER[1][:steps]]]
    result = analyze(write_ranks(tmp_path / "window-000010-000020", [JITTER[0][:steps], *slowed]))
    assert result.stragglers == [1]
    reason = result.straggler_reasons[1]
    assert reason.startswith(f"reaches {steps} of {2 * steps} collectives late")
    assert f"the median of {steps} steps), and no profiled op explains it" in reason
    assert result.recommendations[0].startswith("rank 1 reaches")
    if steps >= 8:  # arrival order needs 8 steps for 2 ranks: 2 x (1/2)^8 < 0.01
        assert result.culprit is not None and (result.culprit["rank"], result.culprit["phase"]) == (1, None)
    else:
        assert result.culprit is None


def test_a_rank_slowed_by_20_ms_of_input_a_step_names_its_input(tmp_path: Path) -> None:
    fetch = [[0.2] * 3, [20.2] * 3]
    result = analyze(write_ranks(tmp_path / "window-000010-000012", [row[:3] for row in JITTER], fetch_ms=fetch))
    assert result.stragglers == [1]
    assert result.straggler_reasons[1].endswith("more input time per step than the others")


def test_our_logging_gather_is_not_a_collective(tmp_path: Path) -> None:
    """Our interval metrics' cross-rank gather, inside its ``perf_callbacks.overhead`` span, at a logging step: the
    same collectives and the same straggler text as without it (it was "3 of 7 collectives" against "3 of 6")."""
    extra = [[0.0] * 3, [20.0] * 3]
    plain = analyze(write_ranks(tmp_path / "plain" / "window-000010-000012", extra))
    logged = analyze(write_ranks(tmp_path / "logged" / "window-000010-000012", extra, gather_at=(1,)))
    assert [len(r.collectives_ms) for r in logged.ranks] == [6, 6]
    assert logged.straggler_reasons == plain.straggler_reasons
    assert logged.straggler_reasons[1].startswith("reaches 3 of 6 collectives late")
    assert all(set(r.collectives_by_op_ms) == {"all_reduce"} for r in logged.ranks)


def test_our_logging_gather_does_not_make_rank_0_a_straggler(tmp_path: Path) -> None:
    """Rank 0 logs 5 ms before it reaches the gather at every step (a slow tracker): rank 1 waits, but inside our own
    span, which is not the training's collective."""
    healthy = [[0.0] * 3, [0.0] * 3]
    result = analyze(write_ranks(tmp_path / "window-000010-000012", healthy, gather_at=(0, 1, 2), log_ms=5.0))
    assert result.stragglers == [], result.straggler_reasons
    assert [len(r.collectives_ms) for r in result.ranks] == [6, 6]

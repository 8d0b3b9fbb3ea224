"""The input loss a verdict rests on: the lower median step's, capped at the window's share, nothing under 1 ms."""

from __future__ import annotations

import pytest

from perf_callbacks.analysis.judge.evidence import input_evidence
from perf_callbacks.analysis.results.result import RankResult, StepResult


def rank(inputs_ms: list[float], window_share: float, step_ms: float = 10.0) -> RankResult:
    """Steps of ``step_ms`` each, of which ``inputs_ms`` waited for input; the window's input share as given."""
    steps = [StepResult(n, step_ms, {"compute": step_ms - w, "input": w}) for n, w in enumerate(inputs_ms)]
    total = step_ms * len(steps)
    return RankResult(0, "t", total, None, None, step_ms, 0.5, {"input": window_share}, steps, {}, {}, [],
                      [], None, [], {}, None)


def test_two_steps_take_the_lower_median() -> None:
    """0.5 ms and 3 ms of wait: the lower one is the median step's, under the 1 ms floor (the mean, 1.75, is not)."""
    found = input_evidence(rank([0.5, 3.0], 0.175))
    assert (found.share, found.median_wait_ms, found.longest_wait_ms) == (0.0, 0.5, 3.0)
    found = input_evidence(rank([2.0, 6.0], 0.4))  # both over the floor: the lower median's share, 20%
    assert found.share == pytest.approx(0.2) and found.median_wait_ms == 2.0


def test_the_median_steps_share_is_capped_at_the_windows() -> None:
    """Steps that each wait 30% of their time, in a window whose input loss is 10% (time between the steps)."""
    found = input_evidence(rank([3.0, 3.0, 3.0], 0.1))
    assert (found.share, found.window_share) == (0.1, 0.1)
    assert input_evidence(rank([3.0, 3.0, 3.0], 0.5)).share == pytest.approx(0.3)  # the control: under the cap

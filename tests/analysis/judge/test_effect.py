"""The effect, its interval and the call (``analysis/judge/effect.py``), on fed step times: no clock anywhere."""

from __future__ import annotations

import math
import random

import pytest

from perf_callbacks.analysis.judge.effect import CALLS, THRESHOLD, block_length, decide, estimate


def loader_steps(n: int, rng: random.Random, scale: float = 1.0, noise: float = 0.1,
                 outliers: float = 0.02) -> list[float]:
    """``n`` steps of a two-worker loader: a waiting step (3x) then a free one, lognormal noise, rare 10x outliers."""
    out = []
    for i in range(n):
        x = (0.030 if i % 2 == 0 else 0.010) * scale * math.exp(rng.gauss(0.0, noise))
        if rng.random() < outliers:
            x *= 10
        out.append(x)
    return out


def test_a_halved_cost_with_alternating_steps_is_an_improvement() -> None:
    rng = random.Random(1)
    e = estimate(loader_steps(200, rng), loader_steps(200, rng, scale=0.5))
    assert e.call == "improvement" and e.steps_to_decide is None
    assert e.ci_high < -THRESHOLD and e.effect == pytest.approx(-0.5, abs=0.05)
    assert e.block % 2 == 0  # a block holds as many waiting as free steps


def test_two_runs_of_one_distribution_are_called_a_change_at_most_2_percent_of_the_time() -> None:
    rng = random.Random(2)
    calls = [estimate(loader_steps(200, rng), loader_steps(200, rng)).call for _ in range(200)]
    changes = sum(c in ("improvement", "regression") for c in calls)
    assert changes <= 4, calls  # 2% of 200


def test_a_1_percent_shift_over_2000_steps_is_no_change() -> None:
    rng = random.Random(3)
    e = estimate(loader_steps(2000, rng, noise=0.05), loader_steps(2000, rng, scale=1.01, noise=0.05))
    assert e.call == "no change"
    assert -THRESHOLD <= e.ci_low < 0.01 < e.ci_high <= THRESHOLD


def test_a_10_percent_shift_in_10_noisy_steps_is_undecided_and_its_step_count_decides() -> None:
    rng = random.Random(4)
    e = estimate(loader_steps(10, rng, noise=0.3), loader_steps(10, rng, scale=0.9, noise=0.3))
    assert e.call == "undecided" and e.steps_to_decide is not None and e.steps_to_decide > 10
    n = e.steps_to_decide
    decided = [estimate(loader_steps(n, rng, noise=0.3), loader_steps(n, rng, scale=0.9, noise=0.3)).call
               for _ in range(10)]
    assert decided.count("improvement") >= 7, (n, decided)  # the count aims at 80% power
    assert "regression" not in decided


def ar_steps(n: int, rng: random.Random, scale: float = 1.0, phi: float = 0.8) -> list[float]:
    """``n`` steps whose log cost is an AR(1) series: a machine with slow and fast stretches."""
    x, out = 0.0, []
    for _ in range(n):
        x = phi * x + rng.gauss(0.0, 0.1)
        out.append(0.01 * scale * math.exp(x))
    return out


@pytest.mark.parametrize("steps", [loader_steps, ar_steps])
def test_the_interval_covers_the_true_ratio_about_95_percent_of_the_time(steps) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(6)
    runs = [estimate(steps(200, rng), steps(200, rng, scale=0.5)) for _ in range(200)]
    covered = sum(e.ci_low <= -0.5 <= e.ci_high for e in runs) / len(runs)
    assert 0.88 <= covered <= 0.99  # single steps taken as independent cover far less of the AR(1) series


def test_a_slow_stretch_of_the_machine_lengthens_the_blocks() -> None:
    rng = random.Random(5)
    drift = [0.01 * (2.0 if 100 <= i < 300 else 1.0) * math.exp(rng.gauss(0, 0.05)) for i in range(400)]
    assert block_length(drift) > block_length(loader_steps(400, rng))


def test_the_decision_table_is_one_table() -> None:
    assert set(CALLS) == {"improvement", "regression", "no change", "undecided"}
    assert decide(-0.05, -0.021) == "improvement" and decide(-0.05, -0.019) == "undecided"
    assert decide(0.021, 0.05) == "regression" and decide(-0.02, 0.02) == "no change"


def test_too_few_steps_give_no_interval_and_a_count_that_gives_one() -> None:
    e = estimate([0.01, 0.012, 0.011], [0.005, 0.006, 0.0055])
    assert e.call == "undecided" and e.ci_low == -1.0 and math.isinf(e.ci_high)
    assert e.steps_to_decide is not None and e.steps_to_decide >= 10

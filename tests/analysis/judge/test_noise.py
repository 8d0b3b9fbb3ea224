"""``noise.compare_samples``: each half of the significance rule decides on its own (``diff``'s documented rule)."""

from __future__ import annotations

import math

import pytest

from perf_callbacks.analysis.judge.noise import ALPHA, compare_samples, rank_test, spread

TIGHT = [10.0, 10.1, 10.1, 10.2, 10.2, 10.3, 10.3, 10.4]  # steady steps: IQR 0.2 ms
WIDE = [10.5, 10.6, 10.8, 11.0, 11.4, 12.5, 13.5, 14.5]  # every step slower than TIGHT's, but noisy: IQR 2 ms


@pytest.mark.parametrize(("base", "new"), [(TIGHT, WIDE), (WIDE, TIGHT)], ids=["noisier-new", "noisier-base"])
def test_a_change_within_the_noisier_sides_spread_is_not_significant(base: list[float], new: list[float]) -> None:
    """The median moved 1 ms: beyond one side's spread (0.2) but within the other's (2), with the rank test sure of
    the shift (every step of WIDE is slower). "Beyond the spread of *each* side" means the larger one decides."""
    c = compare_samples(base, new)
    assert abs(c.change) == pytest.approx(1.0)
    assert sorted([spread(base), spread(new)]) == [pytest.approx(0.2), pytest.approx(2.0)]
    assert c.p_value is not None and c.p_value < ALPHA / 10
    assert not c.significant and "within the per-step spread (" in c.reason
    assert compare_samples(base, [x + 2.5 * (1 if new is WIDE else -1) for x in new]).significant  # beyond both


def test_the_rank_test_decides_at_alpha_when_the_change_is_beyond_both_spreads() -> None:
    """ALPHA is 0.05: a p-value between 0.05 and 0.5 is noise, just under 0.05 is significant, just over is not."""
    # A few slow steps (18, 19 ms) among 10-12 ms ones, against 13-17 ms: the medians are 4.5 ms apart, beyond both
    # spreads (3.5 and 4), but the ranks overlap: p = 0.2.
    base, new = [10.0, 10.0, 10.0, 11.0, 11.0, 12.0, 18.0, 19.0], [13.0, 15.0, 16.0, 17.0]
    c = compare_samples(base, new)
    assert c.change == pytest.approx(4.5) and c.change > max(spread(base), spread(new))
    assert 0.15 < (c.p_value or 0.0) < 0.25
    assert not c.significant and c.reason == "within noise: rank test p=0.2 >= 0.05; 4 steps a window are too few to " \
                                             "decide a +41% change: profile 8 (schedule.active)"
    assert c.steps_to_decide == 8
    # one slow step in 8, shifted by 0.3 and 0.4 ms: both beyond the spread (0.15), p on either side of 0.05
    steady = [10.0, 10.4, 10.5, 10.5, 10.6, 10.6, 10.7, 13.0]
    over, under = (compare_samples(steady, [x + shift for x in steady]) for shift in (0.3, 0.4))
    assert spread(steady) == pytest.approx(0.15)
    assert 0.05 < (over.p_value or 0.0) < 0.055 and not over.significant
    assert 0.04 < (under.p_value or 1.0) < 0.05 and under.significant


def test_rank_test_exact_and_normal_approximation() -> None:
    assert rank_test([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]) == pytest.approx(2 / 70)  # 2 of C(8,4) orderings
    assert rank_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx(0.1)
    assert rank_test([1.0, 3.0, 5.0, 7.0], [2.0, 4.0, 6.0, 8.0]) == pytest.approx(0.6857, abs=1e-4)
    # ties (three pairs): U1 = 6.5 - 6 = 0.5, var = 9/12 * (7 - 3*6/30) = 4.8, z = (4.5 - 0.5 - 0.5) / sqrt(4.8)
    assert rank_test([1.0, 1.0, 2.0], [2.0, 3.0, 3.0]) == pytest.approx(math.erfc(3.5 / math.sqrt(4.8) / math.sqrt(2)))
    assert rank_test([1.0, 1.0, 2.0], [2.0, 3.0, 3.0]) == pytest.approx(0.1101, abs=1e-4)


def test_significance_needs_the_spread_and_the_rank_test() -> None:
    base = [10.0, 10.1, 9.9, 10.2, 10.0, 9.8, 10.1, 10.0]
    assert compare_samples(base, [x + 1.0 for x in base]).significant
    assert spread(base) == pytest.approx(0.125)
    wide = [i * 0.25 for i in range(40)]  # a shift of 3 the rank test sees (p < 1e-4) inside a 4.9 spread
    inside = compare_samples(wide, [x + 3.0 for x in wide])
    assert inside.p_value is not None and inside.p_value < 1e-4 and not inside.significant
    noisy = [10.0, 12.0, 8.0, 11.0, 9.0, 13.0, 7.0, 10.0]
    shifted = compare_samples(noisy, [x + 1.0 for x in noisy])
    assert not shifted.significant and "per-step spread" in shifted.reason
    assert not compare_samples([10.0], [20.0]).significant
    few = compare_samples([10.0, 10.5, 10.2], [14.0, 14.2, 14.1])
    assert few.significant and few.p_value is None and "too few steps for a rank test" in few.reason


def test_the_change_and_its_sides_are_reported() -> None:
    c = compare_samples([10.0, 10.2, 9.9, 10.1, 10.0], [13.0, 13.1, 12.9, 13.2, 13.0])
    assert (c.base, c.new, c.change) == (10.0, 13.0, 3.0)
    assert c.change_pct == pytest.approx(30.0)
    assert (c.spread_base, c.spread_new) == (pytest.approx(0.3), pytest.approx(0.3))
    assert c.reason == f"significant: beyond the per-step spread of both sides (0.3 and 0.3) and the rank test " \
                       f"(p={c.p_value:.2g})"
    assert compare_samples([0.0, 0.0], [1.0, 1.0]).change_pct is None  # no percentage of a zero base


def test_an_empty_side_is_an_error_and_one_step_a_side_is_never_significant() -> None:
    for base, new in (([], [1.0, 2.0]), ([1.0, 2.0], []), ([], [])):
        with pytest.raises(ValueError, match="^both samples need at least one step$"):
            compare_samples(base, new)
    one = compare_samples([10.0], [20.0, 20.1])
    assert not one.significant and one.reason == "too few steps to judge the noise (1 and 2); 1 step a window is too " \
                                                 "few to decide a +101% change: profile 8 (schedule.active)"


def test_two_steps_a_side_are_judged_by_their_range() -> None:
    """Two steps is the fewest with a spread (MIN_STEPS); no rank test yet, so the ranges alone decide."""
    c = compare_samples([10.0, 10.1], [12.0, 12.1])
    assert c.significant and c.p_value is None and "too few steps for a rank test" in c.reason
    assert spread([1.0, 3.0]) == 2.0 and spread([5.0]) == 0.0


def test_a_change_exactly_the_spread_is_within_the_noise() -> None:
    base, new = [10.0, 11.0, 12.0, 13.0, 14.0], [14.5, 15.0, 16.0, 17.0, 18.5]  # ranges 4 and 4, medians 12 and 16
    c = compare_samples(base, new)
    assert c.change == 4.0 == max(c.spread_base, c.spread_new) and (c.p_value or 1.0) < ALPHA  # apart, yet not beyond
    assert not c.significant and c.reason.startswith("within noise: the change (+4) is within the per-step spread")


def test_rank_test_is_symmetric_capped_at_one_and_exact_up_to_50_steps() -> None:
    low, high = [1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]
    assert rank_test(high, low) == rank_test(low, high) == pytest.approx(2 / 70)
    assert rank_test([0.0, 1.0, 6.0, 7.0], [2.0, 3.0, 4.0, 5.0]) == 1.0  # the tail holds more than half: capped
    fifty = [float(i) for i in range(50)]
    above = [100.0, 101.0, 102.0, 103.0]  # all above: 1 of C(54, 4) orderings each way, exactly
    assert rank_test(fifty, above) == pytest.approx(2 / math.comb(54, 4))
    assert rank_test(above, fifty) == pytest.approx(2 / math.comb(54, 4))


def test_rank_test_normal_approximation_with_a_small_variance() -> None:
    # ties: ranks 3 | 1.5, 1.5; U1 = 2, mean 1; var = 2/12 * (4 - 6/6) = 0.5; z = (1 - 0.5) / sqrt(0.5)
    assert rank_test([2.0], [1.0, 1.0]) == pytest.approx(math.erfc(0.5 / math.sqrt(0.5) / math.sqrt(2)))


def test_within_noise_says_how_many_steps_would_decide() -> None:
    """A 3.5x speedup on 3-step windows, where one slow step of the new run widens its range past the change: within
    noise, with the steps that would decide. Many steps with a shift the rank test cannot yet confirm: the sample size
    at which the same shift would reach alpha, and there it does. A change under 5%, or within the spread of many
    steps, gets no such hint: more steps would not make it real."""
    few = compare_samples([35.0, 35.5, 34.8], [10.0, 10.1, 60.0])
    assert not few.significant and few.steps_to_decide == 8
    assert few.reason.endswith("; 3 steps a window are too few to decide a -71% change: profile 8 (schedule.active)")
    base = [10.0, 10.1, 10.2, 10.05, 10.15, 10.12, 14.0, 15.0, 6.0, 5.0]  # tight, with slow and fast outliers
    new = [v + 0.8 for v in base]  # the same steps, each 0.8 ms slower: beyond the IQR, not yet for the rank test
    shifted = compare_samples(base, new)
    assert not shifted.significant and shifted.p_value is not None and shifted.steps_to_decide is not None
    assert shifted.steps_to_decide > len(base)
    more = shifted.steps_to_decide // len(base) + 1
    assert compare_samples(base * more, new * more).significant  # the same shift over that many steps decides
    assert compare_samples([10.0, 10.1, 9.9], [10.2, 10.3, 10.1]).steps_to_decide is None  # +2%
    wide = [9.0, 10.0, 11.0, 12.0, 9.5, 10.5, 11.5, 12.5]
    assert compare_samples(wide, [v + 0.6 for v in wide]).steps_to_decide is None  # +6%, within the IQR (2.0)

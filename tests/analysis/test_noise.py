"""``noise.compare_samples``: each half of the significance rule decides on its own (``diff``'s documented rule)."""

from __future__ import annotations

import pytest

from perf_callbacks.analysis.noise import ALPHA, compare_samples, spread

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
    assert not c.significant and c.reason == "within noise: rank test p=0.2 >= 0.05"
    # one slow step in 8, shifted by 0.3 and 0.4 ms: both beyond the spread (0.15), p on either side of 0.05
    steady = [10.0, 10.4, 10.5, 10.5, 10.6, 10.6, 10.7, 13.0]
    over, under = (compare_samples(steady, [x + shift for x in steady]) for shift in (0.3, 0.4))
    assert spread(steady) == pytest.approx(0.15)
    assert 0.05 < (over.p_value or 0.0) < 0.055 and not over.significant
    assert 0.04 < (under.p_value or 1.0) < 0.05 and under.significant

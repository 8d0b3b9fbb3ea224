"""Is a step-time change real? A rank test and per-step spread over two samples of step times. Standard library only.

A change counts as significant only when both hold:

- the median moved by more than the per-step spread of *each* side: the interquartile range, or the full range
  (max - min) when a side has fewer than ``IQR_MIN_STEPS`` steps, where quartiles mean little;
- a two-sided Mann-Whitney rank test over the per-step times gives ``p < ALPHA`` (exact distribution for small
  samples without ties, normal approximation with tie correction otherwise). With fewer than ``TEST_MIN_STEPS`` steps
  on a side the test cannot reach ``ALPHA`` at all, so there the spread alone decides.

Fewer than ``MIN_STEPS`` steps on either side is never significant: there is no spread to compare against.

A change judged within noise says how many steps a window would need to decide (``steps_to_decide``): with fewer
than ``IQR_MIN_STEPS`` on a side the spread is the full range, which one slow step widens past any change, so
``IQR_MIN_STEPS``; when the spread test passed but the rank test did not, the sample size at which a shift of the
same size would reach ``ALPHA`` (the rank statistic's z grows with the square root of the steps); None when the
change is within the interquartile range of many steps, where more steps would not make it larger, or when the
median moved by less than ``MATERIAL`` of the base.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist, median, quantiles

ALPHA = 0.05
MIN_STEPS = 2
TEST_MIN_STEPS = 4
IQR_MIN_STEPS = 8
MATERIAL = 0.05
"""A change of the median under this share of the base is not worth more steps to decide."""
_EXACT_MAX = 50


@dataclass(frozen=True)
class Change:
    """How the median of ``new`` compares with that of ``base``.

    Args:
        base: median of the base sample.
        new: median of the new sample.
        change: ``new - base``.
        change_pct: ``change`` as a percentage of ``base`` (None when ``base`` is 0).
        spread_base: per-step spread of the base sample (see the module docstring).
        spread_new: per-step spread of the new sample.
        p_value: two-sided Mann-Whitney p-value, None when either side has fewer than ``TEST_MIN_STEPS`` steps.
        significant: whether the change is beyond the noise.
        reason: why it is or is not significant, in words.
        steps_to_decide: for a change within noise, the steps per window that could decide (module docstring).
    """

    base: float
    new: float
    change: float
    change_pct: float | None
    spread_base: float
    spread_new: float
    p_value: float | None
    significant: bool
    reason: str
    steps_to_decide: int | None = None


def compare_samples(base: list[float], new: list[float]) -> Change:
    """Compare two samples of per-step times.

    Example:
        >>> c = compare_samples([10.0, 10.2, 9.9, 10.1, 10.0], [13.0, 13.1, 12.9, 13.2, 13.0])
        >>> c.significant, round(c.change, 1)
        (True, 3.0)
        >>> compare_samples([10.0, 11.0, 9.0, 10.5], [10.2, 9.5, 11.2, 10.0]).significant
        False
    """
    if not base or not new:
        raise ValueError("both samples need at least one step")
    mb, mn = median(base), median(new)
    delta = mn - mb
    pct = delta / mb * 100 if mb else None
    sb, sn = spread(base), spread(new)
    few = min(len(base), len(new)) < TEST_MIN_STEPS
    p = None if few else rank_test(base, new)
    sides = f"{sb:.3g} and {sn:.3g}"
    if min(len(base), len(new)) < MIN_STEPS:
        ok, why = False, f"too few steps to judge the noise ({len(base)} and {len(new)})"
    elif abs(delta) <= max(sb, sn):
        ok, why = False, f"within noise: the change ({delta:+.3g}) is within the per-step spread ({sides})"
    elif p is not None and p >= ALPHA:
        ok, why = False, f"within noise: rank test p={p:.2g} >= {ALPHA}"
    elif p is None:
        ok, why = True, f"significant: beyond the per-step range of both sides ({sides}); too few steps for a rank test"
    else:
        ok, why = True, f"significant: beyond the per-step spread of both sides ({sides}) and the rank test (p={p:.2g})"
    few_steps = min(len(base), len(new))
    material = abs(delta) > MATERIAL * abs(mb)
    need = None if ok or not material else steps_to_decide(few_steps, abs(delta) > max(sb, sn), p)
    if need is not None:
        why += f"; {few_steps} {'step a window is' if few_steps == 1 else 'steps a window are'} too few to decide a " \
               f"{_pct(pct)} change: profile {need} (schedule.active)"
    return Change(mb, mn, delta, pct, sb, sn, p, ok, why, need)


def _pct(pct: float | None) -> str:
    return "" if pct is None else f"{pct:+.0f}%"


def steps_to_decide(steps: int, beyond_spread: bool, p: float | None) -> int | None:
    """Steps per window that could decide a change judged within noise with ``steps`` on the smaller side.

    Example:
        >>> steps_to_decide(3, False, None), steps_to_decide(10, True, 0.2), steps_to_decide(10, False, 0.2)
        (8, 24, None)
    """
    if steps < IQR_MIN_STEPS:
        return IQR_MIN_STEPS
    if not beyond_spread or p is None or p <= 0 or p >= 1:
        return None
    z, want = NormalDist().inv_cdf(1 - p / 2), NormalDist().inv_cdf(1 - ALPHA / 2)
    return math.ceil(steps * (want / z) ** 2) if z > 0 else None


def spread(sample: list[float]) -> float:
    """Interquartile range, or max - min under ``IQR_MIN_STEPS`` values (0 for a single value).

    Example:
        >>> spread([1.0, 2.0, 3.0])
        2.0
    """
    if len(sample) < 2:
        return 0.0
    if len(sample) < IQR_MIN_STEPS:
        return max(sample) - min(sample)
    q1, _, q3 = quantiles(sample, n=4, method="inclusive")
    return q3 - q1


def rank_test(a: list[float], b: list[float]) -> float:
    """Two-sided Mann-Whitney U test p-value that ``a`` and ``b`` come from the same distribution.

    Example:
        >>> round(rank_test([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]), 4)
        0.0286
        >>> rank_test([1.0, 1.0], [1.0, 1.0])
        1.0
    """
    n1, n2 = len(a), len(b)
    ranks, ties = _ranks(a + b)
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u = min(u1, n1 * n2 - u1)
    if not ties and n1 <= _EXACT_MAX and n2 <= _EXACT_MAX:
        counts = _u_counts(n1, n2)
        tail = sum(counts[: int(u) + 1]) / sum(counts)
        return min(1.0, 2 * tail)
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - sum(t**3 - t for t in ties) / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = max(abs(u1 - n1 * n2 / 2) - 0.5, 0.0) / math.sqrt(var)
    return math.erfc(z / math.sqrt(2))


def _ranks(values: list[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) in the original order, and the size of each group of ties."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@lru_cache(maxsize=4096)
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """How many orderings of ``n1`` + ``n2`` distinct values give each value of U (index = U)."""
    if n1 == 0 or n2 == 0:
        return (1,)
    with_last_in_1 = _u_counts(n1 - 1, n2)  # the largest value is in sample 1: it beats all n2 of sample 2
    with_last_in_2 = _u_counts(n1, n2 - 1)
    out = [0] * (n1 * n2 + 1)
    for u, c in enumerate(with_last_in_1):
        out[u + n2] += c
    for u, c in enumerate(with_last_in_2):
        out[u] += c
    return tuple(out)

"""Did it help? The ratio of typical step cost NEW/BASE, with an interval that allows for steps that depend on others.

Standard library only (``math``, ``statistics``): no numpy, no scipy.

Method (Hodges-Lehmann over block medians):

- Each side's per-step costs (seconds per step, per sample or per token) are cut into consecutive blocks of
  :func:`block_length` steps, the same length on both sides, and each block gives its median. Neighbouring steps are
  not independent (a loader with two workers alternates a waiting step and a free one; a slow stretch of the machine
  lasts many steps), but blocks longer than that memory are close to independent, which single steps are not. The
  length is ``n ** (1/3)`` steps, longer where the lag-1 autocorrelation says the memory is longer, and even, so a
  block holds as many waiting as free steps of an alternating loader.
- The effect is the Hodges-Lehmann estimate of the shift between the logarithms of the two sides' block medians (the
  median of all pairwise differences), returned as a fraction: ``exp(shift) - 1`` (-0.5: NEW costs half as much).
- Its confidence interval (``CONFIDENCE``) is the Mann-Whitney rank interval of the same pairwise differences (the
  normal approximation of the rank statistic's distribution). With fewer than ``MIN_BLOCKS`` blocks a side there is
  none: the call is ``undecided``.

The decision, against a practical threshold (default ``THRESHOLD``, 2%), is the table :data:`CALLS`, as criterion.rs
decides "Performance has improved" against its noise threshold. An ``undecided`` call gives ``steps_to_decide``: the
steps per run at which an interval of the same centre would have shrunk (its width goes as one over the square root of
the steps) to clear the nearest threshold with ``POWER`` probability.

Example:
    >>> base = [0.100, 0.200] * 100  # an alternating loader: a waiting step, then a free one
    >>> e = estimate(base, [x * 0.5 for x in base])
    >>> e.call, round(e.effect, 2)
    ('improvement', -0.5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist, fmean, median

THRESHOLD = 0.02
"""A change smaller than this share of the base's typical step cost is no change worth having (``--threshold``)."""
CONFIDENCE = 0.95
POWER = 0.80
MIN_BLOCKS = 5
MAX_BLOCKS = 400
"""Longer blocks past this many a side (the pairwise differences grow as their square)."""

CALLS: dict[str, str] = {
    "improvement": "the whole interval is below -threshold: NEW costs less by more than the threshold",
    "regression": "the whole interval is above +threshold: NEW costs more by more than the threshold",
    "no change": "the whole interval is within -threshold..+threshold",
    "undecided": "the interval reaches across a threshold (or there are too few blocks): more steps would decide",
}
"""The decision table, in one place: call -> the condition on the interval (``ci_low``, ``ci_high``) that gives it."""


@dataclass(frozen=True)
class Effect:
    """NEW against BASE: the effect on typical step cost, its interval and the call.

    Args:
        effect: NEW/BASE - 1 of the typical cost (Hodges-Lehmann), e.g. -0.5 for half the cost.
        ci_low: the interval's low end, on the same scale (-1, no bound, when there are too few blocks).
        ci_high: its high end (+inf when there are too few blocks).
        threshold: the practical threshold the interval was judged against.
        call: ``improvement``, ``regression``, ``no change`` or ``undecided`` (:data:`CALLS`).
        steps_to_decide: for ``undecided``, the steps per run that would decide (None otherwise, or when the interval
            sits on a threshold).
        block: steps per block.
        n_base: steps on the base side.
        n_new: steps on the new side.
    """

    effect: float
    ci_low: float
    ci_high: float
    threshold: float
    call: str
    steps_to_decide: int | None
    block: int
    n_base: int
    n_new: int


def decide(ci_low: float, ci_high: float, threshold: float = THRESHOLD) -> str:
    """The call of :data:`CALLS` for an interval of the effect (fractions: -0.03 is 3% less cost).

    Example:
        >>> decide(-0.6, -0.4), decide(0.05, 0.2), decide(-0.01, 0.015), decide(-0.05, 0.01)
        ('improvement', 'regression', 'no change', 'undecided')
    """
    if ci_high < -threshold:
        return "improvement"
    if ci_low > threshold:
        return "regression"
    if -threshold <= ci_low and ci_high <= threshold:
        return "no change"
    return "undecided"


def estimate(base: Sequence[float], new: Sequence[float], threshold: float = THRESHOLD, typical: bool = True,
             min_block: int = 1) -> Effect:
    """The effect of NEW against BASE on per-step costs (any positive unit, the same on both sides), with its call.

    ``typical``: blocks give their median (the typical step's cost); False: their mean, for a wall-clock cost where
    rare long steps (a checkpoint every tenth step) are part of what the run pays. ``min_block``: the least steps a
    block holds (for means: enough to hold such steps in their share).

    Raises:
        ValueError: when a side has no step, or a cost is not positive.
    """
    if not base or not new:
        raise ValueError("both sides need at least one step")
    if min(base) <= 0 or min(new) <= 0:
        raise ValueError("step costs must be positive")
    length = max(block_length(base), block_length(new), min_block)
    length = max(1, min(length, min(len(base), len(new)) // MIN_BLOCKS))
    length = max(length, math.ceil(max(len(base), len(new)) / MAX_BLOCKS))
    summary = block_medians if typical else block_means
    a = [math.log(x) for x in summary(base, length)]
    b = [math.log(x) for x in summary(new, length)]
    shift, lo, hi = hodges_lehmann(a, b)
    call = decide(_frac(lo), _frac(hi), threshold) if min(len(a), len(b)) >= MIN_BLOCKS else "undecided"
    need = _steps_to_decide(min(len(base), len(new)), lo, hi, threshold) if call == "undecided" else None
    if min(len(a), len(b)) < MIN_BLOCKS:
        lo, hi = -math.inf, math.inf
    return Effect(_frac(shift), _frac(lo), _frac(hi), threshold, call, need, length, len(base), len(new))


def block_length(values: Sequence[float]) -> int:
    """Steps per block for one side: ``n ** (1/3)``, longer where neighbouring steps are correlated; even.

    Example:
        >>> block_length([1.0] * 1000), block_length([1.0, 2.0] * 4)
        (10, 2)
    """
    n = len(values)
    length = math.ceil(float(n) ** (1 / 3))
    rho = _lag1(values)
    if rho > 0:  # an AR(1)-like memory: the variance of a mean grows by (1 + rho) / (1 - rho)
        rho = min(rho, 0.9)
        length = max(length, math.ceil(2 * (1 + rho) / (1 - rho)))
    return int(length + length % 2)


def block_medians(values: Sequence[float], length: int) -> list[float]:
    """The medians of consecutive blocks of ``length`` steps (a last, shorter block is left out unless it is alone).

    Example:
        >>> block_medians([1.0, 3.0, 2.0, 4.0, 9.0], 2)
        [2.0, 3.0]
    """
    n = len(values) // length
    if n == 0:
        return [median(values)]
    return [median(values[i * length:(i + 1) * length]) for i in range(n)]


def block_means(values: Sequence[float], length: int) -> list[float]:
    """The means of consecutive blocks of ``length`` steps (as :func:`block_medians`).

    Example:
        >>> block_means([1.0, 3.0, 2.0, 4.0, 9.0], 2)
        [2.0, 3.0]
    """
    n = len(values) // length
    if n == 0:
        return [fmean(values)]
    return [fmean(values[i * length:(i + 1) * length]) for i in range(n)]


def hodges_lehmann(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """The shift of ``b`` against ``a`` (median of all ``b_j - a_i``) and its Mann-Whitney rank interval.

    The interval's ends are ``inf`` where the sides are too small for ``CONFIDENCE``.

    Example:
        >>> hodges_lehmann([1.0, 2.0, 3.0, 4.0, 5.0], [11.0, 12.0, 13.0, 14.0, 15.0])
        (10.0, 7.0, 13.0)
    """
    diffs = sorted(y - x for x in a for y in b)
    m, n = len(a), len(b)
    z = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
    k = math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12))
    if k < 1:
        return median(diffs), -math.inf, math.inf
    return median(diffs), diffs[k - 1], diffs[m * n - k]


def _steps_to_decide(steps: int, lo: float, hi: float, threshold: float) -> int | None:
    """Steps per run for the interval (log scale) to clear its nearest threshold with ``POWER`` probability."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return max(2 * steps, MIN_BLOCKS * 2)  # no interval yet: twice the steps gives one
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    bounds = (math.log(1 - threshold), math.log(1 + threshold))
    distance = min(abs(centre - x) for x in bounds)
    if distance < 1e-9 or half <= 0:
        return None
    z = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
    grow = ((z + NormalDist().inv_cdf(POWER)) / z) ** 2
    need = math.ceil(steps * grow * (half / distance) ** 2)
    return max(need, steps + 1) if need < 10**9 else None


def _lag1(values: Sequence[float]) -> float:
    """The lag-1 autocorrelation of ``values`` (0 for fewer than 3, or no variance)."""
    if len(values) < 3:
        return 0.0
    mean = fmean(values)
    dev = [x - mean for x in values]
    var = sum(d * d for d in dev)
    return sum(x * y for x, y in zip(dev, dev[1:], strict=False)) / var if var > 0 else 0.0


def _frac(log_ratio: float) -> float:
    """A log ratio as a fraction of the base: ``exp(x) - 1``, with the infinities kept."""
    if log_ratio == math.inf:
        return math.inf
    return -1.0 if log_ratio == -math.inf else math.exp(log_ratio) - 1

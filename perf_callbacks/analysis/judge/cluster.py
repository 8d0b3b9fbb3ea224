"""Across ranks: step-time spread, load imbalance and stragglers (ranks that reach collectives late, and why).

Collectives are matched by order. A rank that arrives late waits least inside each collective, so lateness is read from
durations (max over ranks minus the rank's own) and needs no clock alignment between hosts.

A rank is a straggler only when both hold:

- it reaches collectives late: the median of its lateness per step (summed over the step's collectives; per collective
  when they do not span two steps) is at least 1 ms and 5% of the median step time;
- it is slower than the other ranks beyond the noise, judged as ``diff`` judges a step-time change
  (:func:`perf_callbacks.analysis.judge.noise.compare_samples`) on its work per step (step time less time in
  collectives) against theirs: the medians differ by more than the per-step spread of each side and a rank test agrees,
  or, with fewer than ``TEST_MIN_STEPS`` steps, where no rank test can, each of its steps is slower than every step of
  the others. Traces without steps compare lateness per collective instead.

On a loaded machine every rank is late now and then: one slow step, or lateness that takes turns, names no one.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median

from perf_callbacks.analysis.judge.noise import MIN_STEPS, TEST_MIN_STEPS, compare_samples
from perf_callbacks.analysis.results.result import RankResult

MIN_LATE_MS = 1.0
MIN_LATE_SHARE = 0.05


def lateness_ms(ranks: list[RankResult]) -> dict[int, list[float]]:
    """Per rank, how late it reached each collective that every rank recorded (empty with fewer than two ranks)."""
    with_comm = [r for r in ranks if r.collectives_ms]
    if len(with_comm) < 2:
        return {}
    n = min(len(r.collectives_ms) for r in with_comm)
    longest = [max(r.collectives_ms[i] for r in with_comm) for i in range(n)]
    return {r.rank: [longest[i] - r.collectives_ms[i] for i in range(n)] for r in with_comm}


def lateness_per_step(ranks: list[RankResult]) -> tuple[dict[int, list[float]], bool]:
    """Per rank, its lateness summed over each step's collectives, and True.

    Per collective (and False) when the collectives of some rank do not span two steps, or their steps are unknown.
    """
    late = lateness_ms(ranks)
    steps = {r.rank: r.collective_steps[: len(late[r.rank])] for r in ranks if r.rank in late}
    if not late or any(len(s) < len(late[rk]) or len(set(s)) < MIN_STEPS for rk, s in steps.items()):
        return late, False
    out = {}
    for rk, ms in late.items():
        sums: dict[int, float] = defaultdict(float)
        for step, x in zip(steps[rk], ms, strict=True):
            sums[step] += x
        out[rk] = [sums[s] for s in sorted(sums)]
    return out, True


def stragglers(ranks: list[RankResult]) -> tuple[list[int], dict[int, str]]:
    """Ranks that are late and slower than the others beyond the noise, slowest first, with a reason for each.

    See the module docstring for the rule.
    """
    samples, per_step = lateness_per_step(ranks)
    steps = [r.step_time_ms for r in ranks if r.step_time_ms]
    floor = max(MIN_LATE_MS, MIN_LATE_SHARE * median(steps)) if steps else MIN_LATE_MS
    typical = {rk: median(ms) for rk, ms in samples.items() if ms}
    slow = sorted((rk for rk, ms in typical.items() if ms >= floor and _beyond_noise(rk, ranks, samples, per_step)),
                  key=lambda rk: -typical[rk])
    by_rank, late = {r.rank: r for r in ranks}, lateness_ms(ranks)
    reasons = {}
    for rk in slow:
        text = _late_text(late[rk], typical[rk], len(samples[rk]) if per_step else 0)
        reasons[rk] = _why(by_rank[rk], ranks, text, typical[rk])
    return slow, reasons


def _beyond_noise(rank: int, ranks: list[RankResult], samples: dict[int, list[float]], per_step: bool) -> bool:
    """Whether ``rank`` is slower than the others beyond the noise (``diff``'s rule).

    Compared: its work per step (step time less time in collectives), else (without steps) its lateness per collective.
    """
    if per_step:
        work = {r.rank: [s.time_ms - s.causes_ms.get("communication", 0.0) for s in r.steps] for r in ranks}
    else:
        work = samples
    mine = work.get(rank, [])
    others = [x for rk, ms in work.items() if rk != rank for x in ms]
    if min(len(mine), len(others)) < MIN_STEPS:
        return False
    change = compare_samples(others, mine)
    if not change.significant or change.change <= 0:
        return False
    if min(len(mine), len(others)) < TEST_MIN_STEPS:  # too few steps for a rank test: no overlap at all
        return min(mine) > max(others)
    return True


def _late_text(late: list[float], typical: float, steps: int) -> str:
    hits = [ms for ms in late if ms >= MIN_LATE_MS]
    text = f"reaches {len(hits)} of {len(late)} collectives late, by {sum(hits) / max(len(hits), 1):.1f} ms on average"
    return f"{text} ({typical:.1f} ms a step, the median of {steps} steps)" if steps else text


def imbalance(ranks: list[RankResult]) -> tuple[float | None, float | None]:
    """``(imbalance_ratio, step_time_spread_ms)``: max/mean of work per step (step minus collective wait)."""
    timed = [(r.step_time_ms, r) for r in ranks if r.step_time_ms]
    if len(timed) < 2:
        return None, None
    work = [ms * (1 - r.losses.get("communication", 0.0)) for ms, r in timed]
    mean = sum(work) / len(work)
    spread = max(ms for ms, _ in timed) - min(ms for ms, _ in timed)
    return (max(work) / mean if mean > 0 else None), spread


def _why(slow: RankResult, ranks: list[RankResult], text: str, late: float) -> str:
    """Return the cause whose per-step time exceeds the other ranks' median by the most, or untraced host time."""
    others = [r for r in ranks if r.rank != slow.rank and r.steps]
    if not others or not slow.steps:
        return text
    excess = {}
    for cause in ("input", "sync", "host", "copy", "compute", "other"):
        mine = median(s.causes_ms.get(cause, 0.0) for s in slow.steps)
        theirs = median(median(s.causes_ms.get(cause, 0.0) for s in r.steps) for r in others)
        excess[cause] = mine - theirs
    cause, extra = max(excess.items(), key=lambda kv: kv[1])
    if extra >= 0.5 * late and cause != "other":
        return f"{text}: {extra:.1f} ms more {cause} time per step than the others"
    return f"{text}, and no profiled op explains it: host time outside traced ops (Python code, time.sleep, I/O, " \
           "logging) before the collective"

"""Across ranks: step-time spread, load imbalance and stragglers (ranks that reach collectives late, and why).

Collectives are matched by order. A rank that arrives late waits least inside each collective, so lateness is read from
durations (max over ranks minus the rank's own) and needs no clock alignment between hosts.
"""

from __future__ import annotations

from statistics import median

from perf_callbacks.analysis.result import RankResult

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


def stragglers(ranks: list[RankResult]) -> tuple[list[int], dict[int, str]]:
    """Ranks whose mean lateness is over 1 ms and 5% of the step time, with a reason for each."""
    late = lateness_ms(ranks)
    steps = [r.step_time_ms for r in ranks if r.step_time_ms]
    floor = max(MIN_LATE_MS, MIN_LATE_SHARE * median(steps)) if steps else MIN_LATE_MS
    mean = {rk: sum(ms) / len(ms) for rk, ms in late.items() if ms}
    slow = sorted((rk for rk, ms in mean.items() if ms >= floor), key=lambda rk: -mean[rk])
    by_rank = {r.rank: r for r in ranks}
    return slow, {rk: _why(by_rank[rk], ranks, _late_text(late[rk]), mean[rk]) for rk in slow}


def _late_text(late: list[float]) -> str:
    hits = [ms for ms in late if ms >= MIN_LATE_MS]
    return f"reaches {len(hits)} of {len(late)} collectives late, by {sum(hits) / max(len(hits), 1):.1f} ms on average"


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

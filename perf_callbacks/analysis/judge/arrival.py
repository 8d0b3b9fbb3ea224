"""The culprit: the rank the others wait for at the collectives, judged by the order in which ranks arrive.

Each collective is matched across ranks by (process group, sequence number), or, where the trace has no sequence
number (gloo, older torch), by (process group, collective, step, order within the step). Its *start* on a rank is the
enqueue (:mod:`perf_callbacks.analysis.rank.arrivals`); the rank that starts last held the others, and the wait it
caused is its start minus the next latest start, but no more than its own extra work: its time from leaving the
previous collective to this start, less the longest such time of the others (one gloo rank leaves each collective a
little later than the other and so arrives later by as much, with no more work: no wait caused). Ranks on one host
share the clock; across hosts each rank's offset is the median of ``end_r - end_ref`` over matched collectives (every
rank leaves a blocking collective together), kept within the bounds causality sets (:func:`offsets_us`), and is taken
off its starts. Times are wall-clock (``ts`` plus ``baseTimeNanoseconds``).

A collective's wall time does not show this: under DDP a rank slow in backward launches its gradient buckets late and
the others wait inside their own backward, whose wall time then matches the slow rank's. Arrival order shows it.

Decision table (every condition must hold for a culprit; otherwise none is named):

======================  ====================================================================================
condition               rule
======================  ====================================================================================
matched collectives     at least ``MIN_COLLECTIVES``, on at least two ranks
recurrence beyond luck  the rank held the step (caused the most wait in it, and at least the floor below) in
                        ``k`` of ``n`` steps (of ``n`` collectives without steps), with world x P(X >= k | n,
                        1/world) < ``ALPHA`` (a binomial tail; by chance every rank is last 1/world of the time,
                        and any of the ``world`` ranks could have been the one: Bonferroni). A step held by less
                        than the floor counts for no rank: on a loaded machine one rank may be late by a fraction
                        of a millisecond at every collective, and that must not make one long stall recurrent
material                the median over the steps of the wait it causes (0 in a step it did not hold), less the
                        wait for a CPU it had beyond the other ranks (below), is at least the floor:
                        ``MIN_WAIT_MS`` and ``MIN_WAIT_SHARE`` of the median step time (without steps:
                        ``MIN_WAIT_MS`` per collective). The median, not the mean: one stall of a descheduled
                        process in a healthy window is no wait per step
not the machine         where the window measured the ranks' wait for a CPU (``load.run_queue_ms``, the training
                        thread's run-queue delay from schedstat), the rank's wait per step beyond the other
                        ranks' median is taken off the wait it causes: a rank that merely waited for a CPU more
                        than the others is late because of the machine, not of a phase of its own
======================  ====================================================================================

The culprit's *phase* is the one of its phases (data wait, forward, backward, optimizer step; time outside
collectives, median per step) that exceeds the other ranks' median by the most, when that excess is at least
``PHASE_SHARE`` of the wait it causes per step; else None (the time is outside the traced phases).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from math import comb
from statistics import median
from typing import Any

from perf_callbacks.analysis.results.result import RankResult

MIN_COLLECTIVES = 8
ALPHA = 0.01
MIN_WAIT_MS = 1.0
MIN_WAIT_SHARE = 0.10
PHASE_SHARE = 0.5
Key = tuple[Any, ...]


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p).

    Example:
        >>> round(binomial_tail(8, 8, 0.5), 4)
        0.0039
    """
    return sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def matched(ranks: list[RankResult]) -> dict[int, dict[Key, list[Any]]]:
    """Per rank, its collectives by match key, keeping only the keys that every rank with collectives recorded."""
    keyed = {r.rank: _keys(r.arrivals.get("calls", [])) for r in ranks if r.arrivals.get("calls")}
    if len(keyed) < 2:
        return {}
    common = set.intersection(*(set(k) for k in keyed.values()))
    return {rk: {k: v for k, v in calls.items() if k in common} for rk, calls in keyed.items()}


def offsets_us(ranks: list[RankResult], calls: dict[int, dict[Key, list[Any]]]) -> dict[int, float]:
    """Each rank's clock minus the lowest rank's (microseconds): 0 on the same host, else estimated from collectives.

    The estimate is the median of ``end_r - end_ref`` (every rank leaves a blocking collective together), kept inside
    what causality allows: no collective ends on one rank before it started on the other, so the offset lies in
    ``[start_r - end_ref, end_r - start_ref]`` for every matched collective.
    """
    hosts = {r.rank: r.arrivals.get("host", "") for r in ranks}
    ref = min(calls)
    out = {}
    for rk, mine in calls.items():
        theirs = calls[ref]
        if not mine or (hosts.get(rk) and hosts.get(rk) == hosts.get(ref)):
            out[rk] = 0.0
            continue
        lo = max(row[4] - theirs[k][5] for k, row in mine.items())
        hi = min(row[5] - theirs[k][4] for k, row in mine.items())
        guess = median(row[5] - theirs[k][5] for k, row in mine.items())
        out[rk] = min(max(guess, lo), hi) if lo <= hi else guess
    return out


def culprit(ranks: list[RankResult]) -> dict[str, Any] | None:
    """The rank the others wait for, with its phase and recurrence; None under the decision table's rules."""
    calls = matched(ranks)
    keys = sorted(next(iter(calls.values())), key=lambda k: calls[min(calls)][k][4]) if calls else []
    if len(keys) < MIN_COLLECTIVES:
        return None
    off = offsets_us(ranks, calls)
    per_call = [_last(k, prev, calls, off) for prev, k in zip([None, *keys], keys, strict=False)]
    waits: dict[int, float] = defaultdict(float)
    for rk, us, _, _ in per_call:
        waits[rk] += us
    who = max(waits, key=lambda rk: waits[rk])
    step_ms = [s.time_ms for r in ranks for s in r.steps]
    floor = max(MIN_WAIT_MS, MIN_WAIT_SHARE * median(step_ms)) if step_ms else MIN_WAIT_MS
    units = _units(per_call)
    held = [max(w, key=lambda rk: w[rk]) if max(w.values()) >= floor * 1e3 else -1 for w in units]
    world = len(calls)
    k = sum(1 for rk in held if rk == who)
    p_value = min(1.0, world * binomial_tail(k, len(units), 1 / world))  # any of `world` ranks could have been it
    per_step_ms = median(w.get(who, 0.0) for w in units) / 1e3 - cpu_excess_ms(ranks, who)
    if p_value >= ALPHA or per_step_ms < floor:
        return None
    return _describe(who, per_call, ranks, p_value, per_step_ms, off)


def cpu_excess_ms(ranks: list[RankResult], who: int) -> float:
    """How much longer a step ``who`` waited for a CPU than the other ranks' median (ms, at least 0).

    From each window's measured run-queue delay of the training thread (``load.run_queue_ms``) per step; 0 where a
    rank's load was not measured (another tool's trace).
    """
    per_step = {r.rank: r.load["run_queue_ms"] / len(r.steps) for r in ranks
                if r.steps and isinstance((r.load or {}).get("run_queue_ms"), (int, float))}
    others = [ms for rk, ms in per_step.items() if rk != who]
    if who not in per_step or not others:
        return 0.0
    return max(0.0, per_step[who] - median(others))


def _keys(calls: list[list[Any]]) -> dict[Key, list[Any]]:
    out: dict[Key, list[Any]] = {}
    seen: Counter[tuple[Any, ...]] = Counter()
    for row in sorted(calls, key=lambda r: r[4]):
        group, name, seq, step = row[:4]
        if seq >= 0:
            out[(group, seq)] = row
        else:
            seen[(group, name, step)] += 1
            out[(group, name, step, seen[(group, name, step)])] = row
    return out


def _last(key: Key, prev: Key | None, calls: dict[int, dict[Key, list[Any]]],
          off: dict[int, float]) -> tuple[int, float, int, str]:
    """``(rank, wait caused in us, step, collective)`` of the rank that starts collective ``key`` last.

    The wait is the part of its lateness that its own longer work since the previous collective explains: a rank that
    merely leaves each collective later (as one gloo rank does) arrives later by as much with no more work.
    """
    starts = sorted((calls[rk][key][4] - off[rk], rk) for rk in calls)
    (second, _), (last, rk) = starts[-2], starts[-1]
    row, wait = calls[rk][key], last - second
    if prev is not None:
        gaps = {r: calls[r][key][4] - calls[r][prev][5] for r in calls}
        wait = min(wait, gaps[rk] - max(g for r, g in gaps.items() if r != rk))
    return rk, max(wait, 0.0), row[3], row[1]


def _units(per_call: list[tuple[int, float, int, str]]) -> list[dict[int, float]]:
    """Per step, the wait (us) each rank caused in it; per collective when the collectives have no steps."""
    steps = {step for _, _, step, _ in per_call}
    if len(steps) < 2:
        return [{rk: us} for rk, us, _, _ in per_call]
    by_step: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for rk, us, step, _ in per_call:
        by_step[step][rk] += us
    return [dict(w) for _, w in sorted(by_step.items())]


def _describe(who: int, per_call: list[tuple[int, float, int, str]], ranks: list[RankResult], p_value: float,
              per_step_ms: float, off: dict[int, float]) -> dict[str, Any]:
    mine = [(us, step, name) for rk, us, step, name in per_call if rk == who and us > 0]
    names = Counter(name for _, _, name in mine).most_common()
    steps = sorted({step for _, step, _ in mine})
    phase, excess = _phase(who, ranks, per_step_ms)
    out = {"rank": who, "phase": phase, "phase_excess_ms": excess, "last_share": len(mine) / len(per_call),
           "last_count": len(mine), "collectives": len(per_call), "collective": names[0][0],
           "steps": [steps[0], steps[-1]], "wait_ms_each": median(us for us, _, _ in mine) / 1e3,
           "wait_ms_per_step": per_step_ms, "p_value": p_value,
           "clock_offsets_ms": {str(rk): us / 1e3 for rk, us in sorted(off.items())}}
    out["text"] = culprit_text(out)
    return out


def _phase(who: int, ranks: list[RankResult], per_step_ms: float) -> tuple[str | None, float | None]:
    mine = next(r.arrivals.get("phases", {}) for r in ranks if r.rank == who)
    others = [r.arrivals.get("phases", {}) for r in ranks if r.rank != who]
    excess = {p: ms - median(o.get(p, 0.0) for o in others) for p, ms in mine.items()}
    if not excess:
        return None, None
    phase, extra = max(excess.items(), key=lambda kv: kv[1])
    return (phase, extra) if extra >= PHASE_SHARE * per_step_ms else (None, extra)


def culprit_text(c: dict[str, Any]) -> str:
    """One line: who, how often, where, by how much, and in which phase.

    Example:
        >>> print(culprit_text({"rank": 3, "last_share": 0.87, "collective": "AllReduce", "steps": [100, 400],
        ...                     "wait_ms_each": 41.0, "phase": "backward", "phase_excess_ms": 40.0, "collectives": 90}))
        rank 3 last in 87% of 90 collectives (mostly AllReduce), steps 100-400, 41.0 ms each; its backward takes...
    """
    text = (f"rank {c['rank']} last in {c['last_share']:.0%} of {c['collectives']} collectives (mostly "
            f"{c['collective']}), steps {c['steps'][0]}-{c['steps'][1]}, {c['wait_ms_each']:.1f} ms each")
    if c["phase"]:
        return f"{text}; its {c['phase']} takes {c['phase_excess_ms']:.1f} ms a step more than the other ranks' median"
    return f"{text}; none of its traced phases explains it (host time between them: Python code, I/O, logging)"

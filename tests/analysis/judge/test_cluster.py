"""``analysis/judge/cluster.py`` on hand-built rank results: lateness, the straggler rule's every condition, its reason, and
the imbalance figures (``test_stragglers.py`` runs the same rule end to end on written traces)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from perf_callbacks.analysis.judge.cluster import (
    MIN_LATE_MS,
    MIN_LATE_SHARE,
    _beyond_noise,
    _why,
    imbalance,
    lateness_ms,
    lateness_per_step,
    stragglers,
)
from perf_callbacks.analysis.results.result import RankResult, StepResult

NO_OP = ("and no profiled op explains it: host time outside traced ops (Python code, time.sleep, I/O, logging) before "
         "the collective")


def rank(r: int, work: Sequence[float] = (), comm: float = 0.0, collectives: Sequence[float] = (),
         steps_of: Sequence[int] | None = None, causes: dict[str, float] | None = None,
         step_time_ms: float | None = None, losses: dict[str, float] | None = None) -> RankResult:
    """Rank ``r`` whose steps 10, 11, ... do ``work`` ms each besides ``comm`` ms in collectives (and ``causes``)."""
    steps = [StepResult(10 + i, w + comm, {"communication": comm, **(causes or {})}) for i, w in enumerate(work)]
    return RankResult(rank=r, path="", span_ms=0.0, gpu_utilization=None, kernel_busy_fraction=None,
                      step_time_ms=step_time_ms, data_wait_fraction=0.0, losses=losses or {}, steps=steps,
                      copies_ms={}, comm_ms={}, top_ops=[], profiler_flags=[], data_loader=None,
                      collectives_ms=list(collectives), sync_calls_ms={},
                      launches_per_step=None, collective_steps=list(steps_of or []))


def per_step(r: int, work: Sequence[float], late_by: float, longest: float = 30.0, **kw: object) -> RankResult:
    """One collective a step, reached ``late_by`` ms after the first rank (it waits ``longest - late_by`` ms)."""
    n = len(work)
    return rank(r, work, comm=longest - late_by, collectives=[longest - late_by] * n,
                steps_of=list(range(10, 10 + n)), step_time_ms=sorted(work)[n // 2] + longest - late_by, **kw)


STEADY = [10.0, 10.1, 10.0, 10.2, 10.1, 10.0, 10.1, 10.0]


# ---- lateness ---------------------------------------------------------------------------------------------------------
def test_lateness_is_the_longest_wait_less_the_ranks_own() -> None:
    ranks = [rank(0, collectives=[5.0, 1.0, 3.0]), rank(1, collectives=[2.0, 4.0, 3.0]), rank(2, collectives=[5.0, 4.0]),
             rank(3)]  # rank 2 recorded two collectives: two are compared; rank 3 none: left out
    assert lateness_ms(ranks) == {0: [0.0, 3.0], 1: [3.0, 0.0], 2: [0.0, 0.0]}
    assert lateness_ms([rank(0, collectives=[5.0]), rank(1)]) == {}
    assert lateness_per_step([rank(0, collectives=[5.0]), rank(1)]) == ({}, False)


def test_lateness_is_summed_per_step_when_the_collectives_span_two_steps() -> None:
    a = rank(0, collectives=[5.0, 1.0, 5.0, 1.0], steps_of=[10, 10, 11, 11])
    b = rank(1, collectives=[1.0, 5.0, 2.0, 1.0], steps_of=[10, 10, 11, 11])
    assert lateness_per_step([a, b]) == ({0: [4.0, 0.0], 1: [4.0, 3.0]}, True)
    one_step = [rank(0, collectives=[5.0, 1.0], steps_of=[10, 10]), rank(1, collectives=[1.0, 5.0], steps_of=[10, 10])]
    assert lateness_per_step(one_step) == ({0: [0.0, 4.0], 1: [4.0, 0.0]}, False)
    unknown = [rank(0, collectives=[5.0, 1.0, 5.0], steps_of=[10, 11]), rank(1, collectives=[1.0, 5.0, 1.0],
                                                                             steps_of=[10, 11])]
    assert lateness_per_step(unknown) == ({0: [0.0, 4.0, 0.0], 1: [4.0, 0.0, 4.0]}, False)  # a step not known


# ---- the rule: late by at least the floor, and slower beyond the noise ------------------------------------------------
def test_lateness_under_5_percent_of_the_step_names_no_one() -> None:
    """2 ms late at every step and 2 ms slower (beyond the noise): a straggler in a 20 ms step, not in a 130 ms one."""
    for longest, named in ((10.0, [1]), (120.0, [])):
        fast = [per_step(0, STEADY, 0.0, longest), per_step(2, STEADY, 0.0, longest)]
        assert stragglers([*fast, per_step(1, [w + 2.0 for w in STEADY], 2.0, longest)])[0] == named, longest


def test_late_but_not_slower_names_no_one() -> None:
    """Rank 1 reaches every collective 5 ms late, yet its work per step is the others': the noise rule compares work."""
    assert stragglers([per_step(0, STEADY, 0.0), per_step(1, STEADY, 5.0), per_step(2, STEADY, 0.0)])[0] == []


def test_one_late_collective_is_averaged_over_itself() -> None:
    """Two steps of two collectives: rank 1 is 1.5 ms late at one, under 1 ms at the others (1.8 and 1.2 ms a step)."""
    ranks = [rank(0, [10.0, 10.1], collectives=[5.0, 5.0, 5.0, 5.0], steps_of=[10, 10, 11, 11], step_time_ms=20.0),
             rank(1, [20.0, 20.1], collectives=[3.5, 4.7, 4.4, 4.4], steps_of=[10, 10, 11, 11], step_time_ms=20.0)]
    slow, reasons = stragglers(ranks)
    assert slow == [1] and reasons[1].startswith("reaches 1 of 4 collectives late, by 1.5 ms on average (1.5 ms a step")


def test_lateness_of_exactly_the_floor_names_the_rank() -> None:
    step = 40.0  # the median step time: the floor is 5% of it, 2 ms, exactly
    assert max(MIN_LATE_MS, MIN_LATE_SHARE * step) == 2.0
    ranks = [rank(r, [10.0 + r * 5.0] * 4, collectives=[3.0 if r == 0 else 1.0] * 4, steps_of=[10, 11, 12, 13],
                  step_time_ms=step) for r in (0, 1)]
    slow, reasons = stragglers(ranks)
    assert slow == [1] and reasons[1].startswith("reaches 4 of 4 collectives late, by 2.0 ms on average (2.0 ms a step")


def test_stragglers_come_slowest_first() -> None:
    fast = [per_step(r, STEADY, 0.0) for r in (0, 3, 4)]
    slow, _ = stragglers([*fast, per_step(1, [w + 10.0 for w in STEADY], 10.0), per_step(2, [w + 20 for w in STEADY],
                                                                                          20.0)])
    assert slow == [2, 1]


def test_without_steps_lateness_per_collective_decides_and_the_reason_says_no_steps() -> None:
    ranks = [rank(0, collectives=[9.0] * 8), rank(1, collectives=[4.0] * 8)]  # no steps: 8 collectives, 5 ms late each
    slow, reasons = stragglers(ranks)
    assert slow == [1] and reasons[1] == "reaches 8 of 8 collectives late, by 5.0 ms on average"
    assert stragglers([rank(0, collectives=[9.0]), rank(1, collectives=[4.0])]) == ([], {})  # one: no noise to judge


def test_the_late_count_and_average_count_a_1_ms_collective() -> None:
    late = [1.0, 5.0, 6.0, 5.5, 1.0, 5.0, 6.0, 0.5]  # how late rank 1 reaches each collective: 7 by 1 ms or more
    ranks = [rank(0, collectives=[10.0 + x for x in late]), rank(1, collectives=[10.0] * 8)]
    slow, reasons = stragglers(ranks)
    assert slow == [1] and reasons[1] == "reaches 7 of 8 collectives late, by 4.2 ms on average"  # 29.5 / 7


# ---- beyond the noise (diff's rule) ---------------------------------------------------------------------------------
def test_slower_work_beyond_the_noise() -> None:
    def beyond(mine: list[float], *others: list[float]) -> bool:
        ranks = [rank(0, mine), *(rank(r, w) for r, w in enumerate(others, 1))]
        return _beyond_noise(0, ranks, {}, True)

    assert beyond([10.5] * 8, [10.0] * 8)  # 0.5 ms a step with no spread at all: beyond it
    assert not beyond([10.0] * 8, [10.5] * 8)  # faster
    assert not beyond([12.0, 18.0, 14.0, 16.0] * 2, [10.0, 20.0] * 4)  # slower, but within the spread
    assert beyond([20.0, 20.1], [10.0, 10.1])  # two steps a side: the ranges decide, no overlap
    assert not beyond([20.0], [10.0])  # one step: no spread to judge
    assert not beyond([20.0, 30.0, 31.0], [10.0] * 3, [10.0, 10.0, 20.0])  # under 4 steps, touching is overlapping
    # 4 steps against 8 of two ranks: one of theirs (15.5) is slower than one of mine (15), yet the rank test agrees
    assert beyond([15.0, 16.0, 16.0, 16.0], [10.0] * 4, [10.0, 10.0, 10.0, 15.5])


def test_work_is_step_time_less_collectives_and_missing_causes_are_zero() -> None:
    with_key = rank(0, [10.0] * 8)  # its steps say 0 ms of communication
    without = rank(1, [11.0] * 8)
    for s in without.steps:
        del s.causes_ms["communication"]  # e.g. a result read from an older sidecar
    assert _beyond_noise(1, [with_key, without], {}, True)
    assert not _beyond_noise(1, [with_key, rank(1, [10.0] * 8, comm=1.0)], {}, True)  # 1 ms more, all collective


# ---- why -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cause", ["input", "sync", "host", "copy", "compute"])
def test_the_reason_names_the_cause_with_the_most_extra_time(cause: str) -> None:
    slow = rank(1, [30.0] * 3, causes={cause: 20.25})
    others = [rank(0, [10.0] * 3, causes={cause: 0.25}), rank(2, [10.0] * 3, causes={cause: 0.25})]
    assert _why(slow, [slow, *others], "text", 40.0) == f"text: 20.0 ms more {cause} time per step than the others"
    assert _why(slow, [slow, *others], "text", 40.5) == f"text, {NO_OP}"  # under half the lateness: not the cause


def test_untraced_time_is_no_cause_even_when_it_is_the_most() -> None:
    slow = rank(1, [30.0] * 3, causes={"other": 20.0, "input": 12.0})
    fast = rank(0, [10.0] * 3, causes={"other": 0.0, "input": 0.0})
    assert _why(slow, [slow, fast], "text", 20.0) == f"text, {NO_OP}"


def test_missing_causes_count_as_zero_on_either_side() -> None:
    slow, fast = rank(1, [30.0] * 3, causes={"input": 0.5}), rank(0, [10.0] * 3)
    assert _why(slow, [slow, fast], "text", 1.0) == "text: 0.5 ms more input time per step than the others"
    slow, bare = rank(1, [30.0] * 3, causes={"input": 2.0}), rank(0, [10.0] * 3)
    for s in [*slow.steps, *bare.steps]:
        s.causes_ms.pop("communication")
    assert _why(slow, [slow, bare], "text", 2.0) == "text: 2.0 ms more input time per step than the others"


def test_without_steps_on_either_side_the_reason_is_the_lateness_alone() -> None:
    slow, stepless = rank(1, [30.0] * 3, causes={"input": 20.0}), rank(0)
    assert _why(slow, [slow, stepless], "text", 20.0) == "text"
    assert _why(rank(1), [rank(1), rank(0, [10.0] * 3)], "text", 20.0) == "text"


# ---- imbalance -------------------------------------------------------------------------------------------------------
def test_imbalance_is_the_most_work_against_the_mean() -> None:
    comm = {"communication": 0.2}
    assert imbalance([rank(0, step_time_ms=100.0, losses=comm), rank(1, step_time_ms=80.0)]) == (1.0, 20.0)
    assert imbalance([rank(0, step_time_ms=90.0), rank(1, step_time_ms=60.0), rank(2)]) == (pytest.approx(1.2), 30.0)
    assert imbalance([rank(0, step_time_ms=0.3), rank(1, step_time_ms=0.1)]) == (pytest.approx(1.5), pytest.approx(0.2))
    assert imbalance([rank(0, step_time_ms=5.0)]) == (None, None)
    all_wait = {"communication": 1.0}
    assert imbalance([rank(0, step_time_ms=5.0, losses=all_wait), rank(1, step_time_ms=4.0, losses=all_wait)]) \
        == (None, 1.0)

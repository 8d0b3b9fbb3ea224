"""The culprit by arrival order on fed arrivals: silent on healthy ranks with jitter, named with its recurrence and
phase when one rank holds the others, across hosts whose clocks differ, and not fooled by a rank that only leaves each
collective later (as one gloo rank does)."""

from __future__ import annotations

import random

import pytest

from perf_callbacks.analysis.judge.arrival import ALPHA, binomial_tail, culprit, matched, offsets_us
from perf_callbacks.analysis.results.result import RankResult
from tests.analysis.synthetic_results import rank

WORK_MS = 40.0
COMM_MS = 2.0


def window(late_ms: list[list[float]], *, buckets: int = 2, jitter_ms: float = 0.0, seed: int = 0,
           hosts: list[str] | None = None, clock_ms: list[float] | None = None, leave_ms: list[float] | None = None,
           phases: list[dict[str, float]] | None = None, first_step: int = 100, seq: bool = False) -> list[RankResult]:
    """Ranks of a DDP-like loop: per step ``buckets`` all-reduces; rank r's work before step s runs
    ``late_ms[r][s]`` ms longer, plus uniform jitter; every rank leaves a collective when the last arrives (plus
    ``leave_ms[r]``); rank r's clock reads ``clock_ms[r]`` ms ahead."""
    rng = random.Random(seed)
    world, steps = len(late_ms), len(late_ms[0])
    clock = clock_ms or [0.0] * world
    leave = leave_ms or [0.0] * world
    out = [rank(r, [WORK_MS + COMM_MS * buckets] * steps, first_step) for r in range(world)]
    free = [0.0] * world  # when each rank left its last collective (true time, ms)
    calls: list[list[list[object]]] = [[] for _ in range(world)]
    n = 0
    for s in range(steps):
        for b in range(buckets):
            work = WORK_MS / buckets
            arrive = [free[r] + work + (late_ms[r][s] if b == 0 else 0.0) + rng.uniform(0, jitter_ms)
                      for r in range(world)]
            done = max(arrive) + COMM_MS
            for r in range(world):
                row = ["0", "AllReduce", n if seq else -1, first_step + s, (arrive[r] + clock[r]) * 1e3,
                       (done + leave[r] + clock[r]) * 1e3]
                calls[r].append(row)
                free[r] = done + leave[r]
            n += 1
    for r in range(world):
        out[r].arrivals = {"host": (hosts or ["h"] * world)[r], "calls": calls[r],
                           "phases": (phases or [{}] * world)[r]}
    return out


def test_binomial_tail_matches_the_exact_sum() -> None:
    assert binomial_tail(8, 8, 0.5) == pytest.approx(1 / 256)
    assert binomial_tail(0, 5, 0.3) == pytest.approx(1.0)
    assert binomial_tail(7, 8, 0.5) == pytest.approx(9 / 256)


def test_200_healthy_windows_with_jitter_name_a_culprit_at_most_once_in_100() -> None:
    """Ranks 2, 4 and 8, 10 steps, up to 10 ms (a quarter of the work) of random lateness on any rank at any
    collective: the 1/world chance of being last must not read as a culprit."""
    named = 0
    for i in range(200):
        world = (2, 4, 8)[i % 3]
        ranks = window([[0.0] * 10 for _ in range(world)], jitter_ms=10.0, seed=i)
        named += culprit(ranks) is not None
    assert named <= 2


def test_a_rank_late_in_every_step_is_named_with_its_recurrence_and_phase() -> None:
    late = [[0.0] * 12 for _ in range(4)]
    late[3] = [41.0] * 12
    phases = [{"backward": 20.0, "forward": 10.0}] * 3 + [{"backward": 61.0, "forward": 10.0}]
    c = culprit(window(late, jitter_ms=2.0, phases=phases))
    assert c is not None
    assert (c["rank"], c["phase"], c["steps"], c["collectives"]) == (3, "backward", [100, 111], 24)
    assert c["last_share"] == pytest.approx(0.5, abs=0.1)  # late at the first bucket of each step, not the second
    assert c["wait_ms_each"] == pytest.approx(41.0, abs=2.0)
    assert c["p_value"] < ALPHA
    assert c["text"].startswith("rank 3 last in ")
    assert "steps 100-111" in c["text"] and "its backward takes 41.0 ms a step more" in c["text"]


def test_no_phase_is_named_when_no_traced_phase_explains_the_wait() -> None:
    late = [[0.0] * 10, [30.0] * 10]
    c = culprit(window(late, phases=[{"backward": 20.0}, {"backward": 21.0}]))
    assert c is not None and c["phase"] is None
    assert "none of its traced phases explains it" in c["text"]


def test_late_in_a_few_steps_only_names_no_one() -> None:
    """Late by 30 ms in 3 of 10 steps: material, but not beyond chance for 2 ranks (P(X >= 3 | 10, 1/2) = 0.95)."""
    late = [[0.0] * 10, [30.0 if s in (2, 5, 7) else 0.0 for s in range(10)]]
    assert culprit(window(late, jitter_ms=1.0)) is None


def test_a_small_wait_names_no_one() -> None:
    """Last at every step by 2 ms: recurrent, but 5% of a 44 ms step, under MIN_WAIT_SHARE."""
    late = [[0.0] * 10, [2.0] * 10]
    assert culprit(window(late)) is None


def test_a_rank_that_leaves_each_collective_later_causes_no_wait() -> None:
    """Rank 1 leaves every collective 3 ms after rank 0 (gloo's pattern on a loaded machine), so it arrives 3 ms later
    with the same work: it is last everywhere, yet holds no one."""
    ranks = window([[0.0] * 10, [0.0] * 10], leave_ms=[0.0, 3.0], hosts=["h", "h"])
    assert culprit(ranks) is None


def test_clocks_of_two_hosts_are_aligned_by_the_collectives_ends() -> None:
    """Rank 1 on another host whose clock reads 5 s ahead: its offset is found, and the late rank 0 is named (without
    the offset rank 1 would look 5 s late at every collective)."""
    late = [[25.0] * 10, [0.0] * 10]
    ranks = window(late, hosts=["a", "b"], clock_ms=[0.0, 5000.0], jitter_ms=1.0)
    assert offsets_us(ranks, matched(ranks))[1] == pytest.approx(5e6, abs=1e3)
    c = culprit(ranks)
    assert c is not None and c["rank"] == 0
    assert c["clock_offsets_ms"]["1"] == pytest.approx(5000.0, abs=1.0)


def test_the_same_host_shares_one_clock() -> None:
    ranks = window([[0.0] * 10, [25.0] * 10], hosts=["h", "h"], leave_ms=[0.0, 0.7])
    assert offsets_us(ranks, matched(ranks)) == {0: 0.0, 1: 0.0}


def test_collectives_match_by_sequence_number_when_the_trace_has_one() -> None:
    """With ``Seq`` a rank's calls match by it: a rank missing one collective still matches the rest."""
    ranks = window([[0.0] * 12, [30.0] * 12], seq=True)
    ranks[0].arrivals["calls"] = ranks[0].arrivals["calls"][1:]
    assert len(next(iter(matched(ranks).values()))) == 23
    c = culprit(ranks)
    assert c is not None and c["rank"] == 1


def test_one_long_stall_and_a_slight_lead_at_every_step_name_no_one() -> None:
    """Rank 1 arrives 0.3 ms late at every step (one process a little behind on a loaded machine) and once 60 ms late
    (descheduled): recurrent, and 5.3 ms a step on average, but the recurrence is of nothing and the stall is once.
    Only steps held by at least the floor count, and the wait per step is the median."""
    late = [[0.0] * 12, [60.0 if s == 5 else 0.3 for s in range(12)]]
    assert culprit(window(late)) is None
    late[1] = [30.0 if s % 4 else 0.3 for s in range(12)]  # held by 30 ms at 9 of 12 steps: still short of 11
    assert culprit(window(late)) is None
    late[1] = [30.0 if s != 5 else 0.3 for s in range(12)]  # ... at 11 of 12: named
    c = culprit(window(late))
    assert c is not None and c["rank"] == 1 and c["wait_ms_per_step"] == pytest.approx(30.0, abs=0.5)


def test_a_rank_that_waited_for_a_cpu_more_than_the_others_is_the_machine_not_a_culprit() -> None:
    """Rank 1 is 30 ms late at every step, and its training thread waited 30 ms a step for a CPU (schedstat's run-queue
    delay) where rank 0 waited 2 ms: 28 ms of its lateness is the machine's, and what is left (2 ms) is under the
    floor. Had it waited only 12 ms a step, 20 ms a step are its own: named, with that wait."""
    ranks = window([[0.0] * 10, [30.0] * 10])
    for r, waited_ms in zip(ranks, (2.0, 30.0), strict=True):
        r.load = {"wall_ms": 440.0, "run_queue_ms": waited_ms * 10}
    assert culprit(ranks) is None
    ranks[1].load["run_queue_ms"] = 120.0
    c = culprit(ranks)
    assert c is not None and c["rank"] == 1 and c["wait_ms_per_step"] == pytest.approx(20.0, abs=0.5)

"""Between windows, the rank that holds the others back (``core/engine/peers.py``): the rule on fed figures, and
real gloo ranks with one all-reduce a step, one of them slow in data loading or none."""

from __future__ import annotations

import pytest

from perf_callbacks.core.engine.peers import MIN_EXCESS_MS, ROUNDS, SLOW_ROUNDS, Figures, judge
from tests.core.engine.peer_ranks import run_ranks

STEPS = (10, 20, 30, 40, 50)


def ranks(*tables: list[tuple[float, float]]) -> dict[int, dict[int, Figures]]:
    """Each rank's ``(data_ms, rest_ms)`` at the logging steps ``STEPS``."""
    return {r: {s: Figures(r, s, 10, d + rest, d, rest) for s, (d, rest) in zip(STEPS, table, strict=True)}
            for r, table in enumerate(tables)}


def test_a_rank_slow_in_data_loading_is_named_not_the_ranks_that_wait_for_it() -> None:
    """Rank 1 waits 30 ms a step for its batches; rank 0 waits as long in the all-reduce, in the rest of its step."""
    verdict = judge(ranks([(0.1, 41.0)] * 5, [(30.0, 11.0)] * 5))
    assert verdict is not None and (verdict.rank, verdict.phase, verdict.slow, verdict.rounds) == (1, "data_ms", 5, 5)
    assert verdict.steps == (10, 50) and (verdict.rank_ms, verdict.others_ms) == (30.0, 0.1)
    assert "rank 1 is slower than the other ranks in data loading" in verdict.message()


def test_the_rest_of_the_step_is_named_when_no_rank_is_slow_in_data_loading() -> None:
    verdict = judge(ranks([(0.1, 10.0)] * 5, [(0.1, 10.5)] * 5, [(0.1, 40.0)] * 5))
    assert verdict is not None and (verdict.rank, verdict.phase, verdict.others_ms) == (2, "rest_ms", 10.2)


def test_slower_at_fewer_than_four_of_five_logging_steps_is_no_straggler() -> None:
    fine = [(0.1, 10.0)] * 5
    assert judge(ranks(fine, [(30.0, 10.0)] * (SLOW_ROUNDS - 1) + [(0.1, 10.0)] * (ROUNDS - SLOW_ROUNDS + 1))) is None
    assert judge(ranks(fine, [(30.0, 10.0)] * SLOW_ROUNDS + [(0.1, 10.0)])) is not None


def test_a_gap_within_the_noise_or_the_floor_is_no_straggler() -> None:
    """Figures that vary by up to 25 ms from one interval to the next on every rank: 10-13 ms more on one is within
    their noise (4 x 1.4826 x MAD, 15 ms); 4 ms more, on quiet figures, is under the floor (5 ms); less than a
    quarter more, on long steps, under the ratio."""
    noisy0 = [(0.1, 10.0), (0.1, 30.0), (0.1, 12.0), (0.1, 35.0), (0.1, 11.0)]
    noisy1 = [(0.1, 22.0), (0.1, 40.0), (0.1, 25.0), (0.1, 45.0), (0.1, 24.0)]
    assert judge(ranks(noisy0, noisy1)) is None
    assert judge(ranks(noisy0, [(0.1, r + 20.0) for _, r in noisy0])) is not None  # beyond it: named
    assert judge(ranks([(0.1, 10.0)] * 5, [(0.1, 10.0 + MIN_EXCESS_MS - 1)] * 5)) is None
    assert judge(ranks([(0.1, 100.0)] * 5, [(0.1, 124.0)] * 5)) is None


def test_a_rank_without_five_common_logging_steps_names_no_one() -> None:
    table = ranks([(0.1, 10.0)] * 5, [(30.0, 10.0)] * 5)
    del table[1][30]
    assert judge(table) is None and judge({0: table[0]}) is None


@pytest.mark.multiprocess
def test_gloo_a_rank_slow_in_data_loading_is_named_once_on_rank_0(tmp_path) -> None:
    """Rank 1 sleeps 30 ms in each fetch (steps of 10 ms and an all-reduce): rank 0 says so once, naming it."""
    said = run_ranks(tmp_path, slow_data_s=0.03)
    assert said[1] == [] and len(said[0]) == 1, said
    category, message = said[0][0]
    assert category == "SlowRankWarning"
    assert message.startswith("perf-callbacks: rank 1 is slower than the other ranks in data loading")
    assert (tmp_path / "run" / ".perf-callbacks-ranks" / "rank1.json").is_file()


@pytest.mark.multiprocess
def test_gloo_a_healthy_run_names_no_rank(tmp_path) -> None:
    assert run_ranks(tmp_path, slow_data_s=0.0) == [[], []]

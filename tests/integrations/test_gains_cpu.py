"""A real CPU run's estimate against what removing its cause delivers.

Two runs of the same plain training loop through the engine (a tiny model, a 5 ms wait a step) and a dataset whose
``__getitem__`` sleeps ``SAMPLE_MS``: the first at ``num_workers=0`` (the step waits for each fetch), the second with
the workers the first run's advice names. The first run's top recommendation is the input one, whose estimated gain
comes from the decision table (:mod:`perf_callbacks.analysis.judge.decide`): the step can fall to the larger of its
own work and the measured fetch spread over the workers, no further; ``perf-callbacks diff`` of the two runs then
delivers a step-time fall of 0.7-1.1x that estimate (allowing the noise band), and the followed run's own step and
fetch (timed in its workers) show the floor the estimate assumed. Bounds come from what the test plants (the sleep) and
from the first run's own estimate, never from the machine's speed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from perf_callbacks.cli import main
from tests.integrations.loader_helpers import Fetching, plain_loop

SAMPLE_MS = 100.0
BATCH = 2  # 200 ms of sleep a batch against a step of a few ms (40-100 ms on a 2-core machine at a load of 10)
SCHEDULE = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 16, "repeat": 1}
STEPS = 20
ABOVE = 1.1
"""What the change may deliver beyond the estimate and its noise band: the rest of the step, which the estimate does not
claim, moved by up to 6% of the estimate between two runs (217.9 delivered for 204.9 estimated, band 8.4 ms)."""
FAR_BELOW = 0.7
"""The delivered gain must reach this share of the estimate (the issue's 0.7-1.3x, the upper side tighter: the estimate
is an upper bound). What the change delivers is the planted wait (the estimate measures it) plus whatever else moved
between the two runs: on the shared 2-core machine at a load of 4-12 the rest of the step moved by up to 30 ms each way
(delivered 174-236 ms for estimates of 201-208 ms in twelve tries, 0.84-1.15x; where it exceeded the estimate by 28-30
ms, the larger per-step spread of the two runs alone was 28-63 ms)."""


def test_removing_a_planted_data_wait_delivers_what_its_recommendation_estimated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = plain_loop(tmp_path / "slow", DataLoader(Fetching(SAMPLE_MS), batch_size=BATCH, num_workers=0),
                      steps=STEPS, waits_ms=[5.0], schedule=SCHEDULE)
    top = slow.recommendations[0]
    assert slow.verdict == "input_bound" and top.cause == "input", slow.recommendations
    assert top.estimated_gain_ms is not None and slow.step_time_ms is not None and slow.loader is not None
    workers = slow.loader["advice_workers"]
    assert workers is not None and f"try num_workers={workers}" in top, top
    # the fetch (at least the planted sleep) spread over the workers is what the step can fall to, no further
    assert top.estimated_gain_ms <= slow.step_time_ms - SAMPLE_MS * BATCH / workers + 1e-6, top.basis
    assert "upper bound" in top.basis and "fetch" in top.basis
    fast = plain_loop(tmp_path / "fast", DataLoader(Fetching(SAMPLE_MS), batch_size=BATCH, num_workers=workers,
                                                    persistent_workers=True),
                      steps=STEPS, waits_ms=[5.0], schedule=SCHEDULE)

    # the followed run states the bound the estimate is: its steps never beat the planted fetch spread over its
    # workers (the floor the estimate assumed; at most one round of batches found ready when the window opens), and
    # its fetch, now timed in the workers, is the one the estimate used
    assert fast.step_time_ms is not None and fast.loader is not None and fast.loader["fetch_timed"], fast.loader
    times = [s.time_ms for s in fast.ranks[0].steps]
    assert sum(times) >= SAMPLE_MS * BATCH / workers * (len(times) - workers), (times, workers)
    assert slow.loader["fetch_ms_p50"] is not None and fast.loader["fetch_ms_p50"] >= SAMPLE_MS * BATCH, fast.loader
    assert 0.7 <= fast.loader["fetch_ms_p50"] / slow.loader["fetch_ms_p50"] <= 1.3, (slow.loader, fast.loader)
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "slow" / "perf"), str(tmp_path / "fast" / "perf"), "--json", "--windows"]) == 0
    diff = json.loads(capsys.readouterr().out)
    row = diff["estimates"][0]
    assert row["cause"] == "input" and row["estimated_gain_ms"] == pytest.approx(top.estimated_gain_ms)
    delivered, estimate, band = row["delivered_ms"], row["estimated_gain_ms"], row["noise_ms"]
    assert delivered == pytest.approx(diff["step_time_ms"]["base"] - diff["step_time_ms"]["new"])
    # the estimate bounds what removing the data wait gives; the rest of the step moves between two runs too (up to 13
    # ms of 205 on a quiet machine, beyond the 8 ms band of two steady runs): a tenth more is allowed, not a doubling
    assert delivered <= ABOVE * estimate + band, row
    assert delivered >= FAR_BELOW * estimate, row  # and not a loose one: 0.7-1.1x the estimate (and its band)
    # the followed run's steps come in rounds of its workers (one waits for both, the next finds its batch ready), so
    # its per-step spread is the rounds' (159 ms seen): diff may call the change within that noise; the bounds above
    # hold either way
    assert row["outcome"] in ("within the estimate", "beyond the estimate", "within noise"), (
        row, diff["step_time_ms"]["noise"])
    # the time came off the cause the recommendation named: the data wait fell, by no more than the upper bound
    assert FAR_BELOW * estimate <= -row["cause_change_ms"] <= ABOVE * estimate + band, row

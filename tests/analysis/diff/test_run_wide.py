"""``compare_runs`` and its text on fed step records (``analysis/diff/run_wide.py``, ``run_text.py``): no clock."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from perf_callbacks.analysis.diff.run_text import format_run_diff
from perf_callbacks.analysis.diff.run_wide import TooFewSteps, compare_runs
from perf_callbacks.analysis.diff.steps import WINDOW, StepRecord


def record(ms: float, n: int = 300, batch: float = 8.0, aside: list[float] | None = None, rank: int = 0,
           seed: int = 0, contention: float = 0.05, **machine: Any) -> StepRecord:
    """``n`` steps of an alternating loader around ``ms`` (a waiting step, then a free one), 5% noise."""
    rng = random.Random(seed)
    times = [ms / 1e3 * (1.5 if i % 2 else 0.5) * math.exp(rng.gauss(0, 0.05)) for i in range(n)]
    meta = {"cpu_contention": contention, "machine": {"cpu_cores": 2, "world_size": 1, "torch": "2.5", **machine}}
    return StepRecord(rank, [float(i) for i in range(n)], times, [batch] * n, [0.0] * n, aside or [0.0] * n,
                      [0.0] * n, meta=meta, path=f"run/steps-rank{rank}.f32")


def test_the_same_machine_and_batch_compare_step_time() -> None:
    d = compare_runs([record(10.0, seed=1)], [record(7.0, seed=2)])
    assert d["unit"] == "step time" and d["call"] == "improvement" and not d["machine_differs"]
    assert d["effect"] == pytest.approx(-0.3, abs=0.02) and d["ci_high"] < -0.02 and d["secondary"] == []
    text = format_run_diff(d).splitlines()
    assert text[3].startswith("step time -") and text[3].endswith("): improvement, beyond the 2% threshold")


def test_a_checkpoint_every_tenth_step_removed_is_a_wall_clock_gain_that_step_time_does_not_see() -> None:
    every_tenth = [0.05 if i % 10 == 9 else 0.0 for i in range(300)]  # 50 ms set aside every 10 steps of 10 ms
    d = compare_runs([record(10.0, seed=1, aside=every_tenth)], [record(10.0, seed=2)])
    assert d["unit"] == "wall time per sample" and d["call"] == "improvement"
    assert d["effect"] == pytest.approx(-1 / 3, abs=0.05)  # 15 ms of wall a step -> 10
    [step] = d["secondary"]
    assert step["unit"] == "step time" and step["call"] in ("no change", "undecided")
    assert "time set aside (checkpoints, validation, compilation) 34% -> 0% of the wall time" in format_run_diff(d)


def test_a_cpu_contention_that_moved_withholds_the_call_and_is_said_first() -> None:
    d = compare_runs([record(10.0, seed=1, contention=0.82)], [record(5.0, seed=2, contention=0.03)])
    assert d["machine_differs"] and d["withheld"] and d["call"] == "undecided" and d["steps_to_decide"] is None
    assert d["ci_high"] < -0.02  # the interval alone would call it an improvement
    text = format_run_diff(d).splitlines()
    assert text[3] == "the runs differ besides the change: CPU contention 82% -> 3% (the training thread's wait for " \
                      "a CPU)"
    assert text[4].endswith(": undecided") and text[5].startswith("  no call: the CPU contention moved")


def test_a_new_torch_or_gpu_is_said_first_and_the_call_stands() -> None:
    d = compare_runs([record(10.0, seed=1, gpu="A100")], [record(7.0, seed=2, torch="2.6", gpu="H100")])
    assert d["machine_differs"] and not d["withheld"] and d["call"] == "improvement"
    assert [x["text"] for x in d["machine"]] == ["GPU A100 -> H100", "torch 2.5 -> 2.6"]


def test_ranks_are_joined_step_by_step_at_the_slowest_and_profiled_steps_are_left_out() -> None:
    slow = record(20.0, seed=3, rank=1)
    slow.flags[100:110] = [float(WINDOW)] * 10
    d = compare_runs([record(10.0, seed=1), slow], [record(10.0, seed=2), record(10.0, seed=4, rank=1)])
    assert d["base"]["ranks"] == [0, 1] and d["base"]["compared_steps"] == 300 - 15 - 10  # warm-up 5%, window
    assert d["effect"] == pytest.approx(-0.5, abs=0.05)  # rank 1 was the slow one: 20 ms -> 10
    assert d["base"]["batch"] == 16  # the samples of both ranks


def test_too_few_comparable_steps_ask_for_the_windows() -> None:
    with pytest.raises(TooFewSteps, match="holds 9 comparable steps"):
        compare_runs([record(10.0, n=12)], [record(10.0)])

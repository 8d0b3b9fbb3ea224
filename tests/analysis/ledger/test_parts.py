"""The ledger on fed step records (``analysis/ledger/``): each rule's part, exactly; no clock."""

from __future__ import annotations

from typing import Any

import pytest

from perf_callbacks.analysis.diff.steps import COMPILED, WINDOW, StepRecord
from perf_callbacks.analysis.ledger.advice import ledger_advice
from perf_callbacks.analysis.ledger.parts import rank_ledger
from perf_callbacks.analysis.ledger.text import ledger_json, ledger_lines, summary_line


def record(times: list[float], waits: list[float] | None = None, flags: list[int] | None = None,
           aside: list[float] | None = None, rank: int = 0, workers: int | None = 0, **stamps: Any) -> StepRecord:
    """Steps back to back from 1.0 s (the engine's construction at 0, the process' start at -2 s), closed 0.5 s
    after the last, whose open step followed them for 0.1 s (completed) and 0.2 s to close."""
    n = len(times)
    waits, flags, aside = waits or [0.0] * n, flags or [0] * n, aside or [0.0] * n
    end = 1.0 + sum(times) + sum(aside) + stamps.pop("own", 0.0)
    ledger = {"engine_s": 0.0, "process_start_s": -2.0, "callback_s": -0.5, "first_step_s": 1.0,
              "close_begin_s": end + 0.3, "close_s": end + 0.5, "hang_limit_s": 300.0,
              "open_step": {"step": n, "ended": True, "begin_s": end, "elapsed_s": 0.1, "wait_s": 0.0,
                            "aside_s": 0.0, "own_s": 0.0}, **stamps}
    meta = {"ledger": ledger, "machine": {"num_workers": workers}}
    return StepRecord(rank, [float(i) for i in range(n)], times, [8.0] * n, waits, aside,
                      [float(f) for f in flags], meta=meta, path="")


def test_the_parts_of_plain_steps_add_up_to_the_wall() -> None:
    led = rank_ledger(record([0.1] * 10, waits=[0.02] * 10))
    assert led is not None and led.origin == "process" and led.steps == 11
    p = led.parts
    assert p["startup_before"] == pytest.approx(1.5) and p["startup"] == pytest.approx(1.5)
    assert p["productive"] == pytest.approx(10 * 0.08 + 0.1) and p["data_wait"] == pytest.approx(0.2)
    assert p["after"] == pytest.approx(0.2) and p["own"] == pytest.approx(0.2)
    assert p["unaccounted"] == pytest.approx(0.0, abs=1e-9) and led.wall_s == pytest.approx(2.0 + 1.0 + 1.0 + 0.5)
    assert led.goodput == pytest.approx(0.9 / led.wall_s)


def test_a_slow_step_is_anomalous_a_step_over_the_hang_limit_a_stall_and_the_first_step_warm_up() -> None:
    times = [0.5] + [0.1] * 10 + [1.1] + [0.1] * 5 + [400.1]
    led = rank_ledger(record(times))
    assert led is not None
    assert led.parts["warmup"] == pytest.approx(0.4) and led.parts["anomalous"] == pytest.approx(1.0)
    assert led.parts["stalls"] == pytest.approx(400.0) and led.parts["unaccounted"] == pytest.approx(0.0, abs=1e-6)


def test_a_step_just_above_the_median_is_productive() -> None:
    led = rank_ledger(record([0.1] * 10 + [0.2]))  # 2x the median: under the 2.5x bar
    assert led is not None and led.parts["anomalous"] == 0 and led.parts["productive"] == pytest.approx(1.3)


def test_compiling_and_profiled_steps_above_the_median_are_compile_and_our_own() -> None:
    flags = [COMPILED] + [0] * 5 + [WINDOW] + [0] * 5
    led = rank_ledger(record([3.1] + [0.1] * 5 + [0.6] + [0.1] * 5, flags=flags,
                             set_aside={"validation": 0.0, "checkpoint": 0.0, "compile": 0.0, "own": 0.0}))
    assert led is not None and led.parts["compile"] == pytest.approx(3.0) and led.parts["warmup"] == 0
    assert led.parts["own"] == pytest.approx(0.5 + 0.2) and led.parts["anomalous"] == 0


def test_the_set_aside_time_splits_by_kind_and_the_rest_stays_set_aside() -> None:
    aside = [0.3 if i % 5 == 4 else 0.05 for i in range(20)]  # 4 evaluations of 0.25 s, a 50 ms checkpoint a step
    kinds = {"validation": 1.0, "checkpoint": 20 * 0.05, "compile": 0.0, "own": 0.4}
    led = rank_ledger(record([0.1] * 20, aside=aside, own=0.4, set_aside=kinds,
                             set_aside_count={"validation": 4, "checkpoint": 20, "compile": 0}))
    assert led is not None and led.counts == {"evaluation": 4, "checkpoint": 20}
    assert led.parts["evaluation"] == pytest.approx(1.0) and led.parts["checkpoint"] == pytest.approx(1.0)
    assert led.parts["own"] == pytest.approx(0.4 + 0.2) and led.parts["set_aside"] == pytest.approx(0.0, abs=1e-6)
    assert led.parts["unaccounted"] == pytest.approx(0.0, abs=1e-6)
    whole = rank_ledger(record([0.1] * 20, aside=aside))  # an older record: one set-aside part
    assert whole is not None and whole.parts["set_aside"] == pytest.approx(2.0) and whole.parts["checkpoint"] == 0


def test_fetches_far_above_the_median_wait_are_worker_start_up_with_workers_only() -> None:
    waits = [0.5 if i % 4 == 0 else 0.01 for i in range(12)]  # each 4-step epoch's first fetch starts the workers
    led = rank_ledger(record([0.6 if w > 0.1 else 0.11 for w in waits], waits=waits, workers=2))
    assert led is not None and led.parts["worker_startup"] == pytest.approx(3 * 0.49) and led.spikes == [0, 4, 8]
    assert led.parts["data_wait"] == pytest.approx(12 * 0.01)
    [advice] = [a for a in ledger_advice(led) if a.part == "worker_startup"]
    assert "persistent_workers=True" in advice.text and advice.saving_s == pytest.approx(2 * 0.49)
    same = rank_ledger(record([0.6 if w > 0.1 else 0.11 for w in waits], waits=waits, workers=0))
    assert same is not None and same.parts["worker_startup"] == 0
    assert same.parts["data_wait"] == pytest.approx(3 * 0.5 + 9 * 0.01)


def test_a_run_that_did_not_close_has_no_ledger_and_an_unreadable_start_falls_back_to_the_callback() -> None:
    rec = record([0.1] * 3)
    del rec.meta["ledger"]["close_s"]
    assert rank_ledger(rec) is None
    rec = record([0.1] * 3, process_start_s=None)
    led = rank_ledger(rec)
    assert led is not None and led.origin == "callback" and led.parts["startup_before"] == 0
    assert "the ledger starts at the callback's construction" in "\n".join(ledger_lines([led]))


def test_an_open_step_that_found_no_batch_is_after_the_last_step() -> None:
    rec = record([0.1] * 3)
    rec.meta["ledger"]["open_step"] |= {"ended": False, "wait_s": 0.05}
    led = rank_ledger(rec)
    assert led is not None and led.steps == 3 and led.parts["after"] == pytest.approx(0.3 - 0.05)
    assert led.parts["data_wait"] == pytest.approx(0.05) and led.parts["unaccounted"] == pytest.approx(0, abs=1e-9)


def test_the_report_lines_name_each_rank_and_the_slowest_ranks_difference() -> None:
    fast, slow = rank_ledger(record([0.1] * 10)), rank_ledger(record([0.1] * 10, waits=[0.0] * 9 + [0.0], rank=1,
                                                                     own=0.0, close_s=5.0))
    assert fast is not None and slow is not None
    lines = ledger_lines([fast, slow])
    assert lines[0].startswith("ledger: ") and lines[0].endswith("(rank 1, the slowest)")
    assert lines[1].startswith("  rank 0: ") and "s shorter; the slowest rank's perf-callbacks is +" in lines[1]
    assert lines[2].startswith("  rank 1: ") and lines[2].endswith("(slowest)")
    data = ledger_json([fast, slow])
    assert data is not None and data["rank"] == 1 and [r["rank"] for r in data["ranks"]] == [0, 1]
    assert summary_line(fast).startswith(f"{fast.wall_s:.3g} s, goodput {fast.goodput:.0%}: start-up")

"""The ledger of real Lightning runs: each planted part found within 5% or 50 ms, the parts adding up to the wall."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf_callbacks.analysis.ledger.advice import ledger_advice
from perf_callbacks.analysis.ledger.parts import Ledger
from perf_callbacks.analysis.ledger.text import run_ledgers
from tests.integrations.ledger_helpers import WORKER_START_S, Planted, epochs_fit, planted_fit


def close_to(found: float, planted: float) -> bool:
    return abs(found - planted) <= max(0.05 * planted, 0.05)


def the_ledger(tmp_path: Path) -> Ledger:
    [led] = run_ledgers(tmp_path / "perf")
    return led


def adds_up(led: Ledger, planted: Planted) -> None:
    """The parts add up to the ledger's wall time, and the ledger's wall from the callback to the test's own."""
    assert abs(sum(led.parts.values()) - led.wall_s) < 1e-6
    since_callback = led.wall_s - led.parts["startup_before"]
    measured = planted.t_end - planted.t_callback
    assert abs(since_callback - measured) <= 0.01 * measured, (since_callback, measured)
    assert abs(led.parts["unaccounted"]) <= 0.01 * since_callback, led.parts


def test_a_sleep_before_fit_is_start_up_and_the_parts_add_up_to_the_wall(tmp_path: Path) -> None:
    planted = planted_fit(tmp_path, before_fit_s=1.0)
    led = the_ledger(tmp_path)
    assert planted.t_first_batch is not None
    truth = planted.t_first_batch - planted.t_callback  # the test's own clock: callback to first batch
    assert led.parts["startup"] >= planted.before_fit_s
    assert close_to(led.parts["startup"], truth), (led.parts["startup"], truth)
    assert led.origin in ("process", "previous_run") and led.parts["startup_before"] > 0  # the first fit, or a later
    assert led.steps == 12
    adds_up(led, planted)


def test_a_checkpoint_every_step_is_the_checkpoint_part_and_the_advice_names_an_interval(tmp_path: Path) -> None:
    planted = planted_fit(tmp_path, steps=10, ckpt_s=0.1)
    led = the_ledger(tmp_path)
    assert planted.checkpoint_s == pytest.approx(1.0)
    assert planted.checkpoint_s <= led.parts["checkpoint"] <= planted.saves_s + 1e-3  # the saves on the test's clock
    assert close_to(led.parts["checkpoint"], planted.saves_s)
    assert led.counts["checkpoint"] == 10
    assert led.parts["set_aside"] < 0.05 and led.parts["anomalous"] < 0.05
    adds_up(led, planted)
    [advice] = [a for a in ledger_advice(led) if a.part == "checkpoint"]
    assert advice.every is not None and advice.every > 1
    assert f"every_n_train_steps={advice.every}" in advice.text
    assert advice.saving_s == pytest.approx(led.parts["checkpoint"] * (1 - 1 / advice.every))


def test_evaluation_every_few_steps_and_a_stalled_step_are_their_parts(tmp_path: Path) -> None:
    planted = planted_fit(tmp_path, steps=15, val_every=5, val_sleep=0.2, stall_at=7, stall_s=1.0)
    led = the_ledger(tmp_path)
    assert planted.evaluation_s == pytest.approx(0.6)
    assert planted.evaluation_s <= led.parts["evaluation"]  # the sleeps, and the loops around them on this machine:
    assert close_to(led.parts["evaluation"], planted.validations_s), (led.parts, planted)  # timed whole by the test
    assert led.counts["evaluation"] == 3
    stalled = planted.stalled_step_s  # the stall and the step's own work, on a loaded machine its load too
    assert planted.stall_s - 0.05 <= led.parts["anomalous"] <= stalled + 0.05, (led.parts, stalled)
    assert led.parts["checkpoint"] == 0 and led.parts["stalls"] == 0
    adds_up(led, planted)


def test_workers_started_at_each_epoch_are_worker_start_up_and_the_advice_names_persistent_workers(
        tmp_path: Path) -> None:
    starts = epochs_fit(tmp_path / "a", persistent=False)  # each epoch's iter() to its first batch, on our clock
    [led] = run_ledgers(tmp_path / "a" / "perf")
    assert len(starts) == 4 and min(starts) >= WORKER_START_S
    assert close_to(led.parts["worker_startup"], sum(starts)), (led.parts, starts)
    assert led.steps == 16 and len(led.spikes) == 4
    [advice] = [a for a in ledger_advice(led) if a.part == "worker_startup"]
    assert "persistent_workers=True" in advice.text
    assert advice.saving_s == pytest.approx(led.parts["worker_startup"] * 3 / 4)
    epochs_fit(tmp_path / "b", persistent=True)
    [once] = run_ledgers(tmp_path / "b" / "perf")
    assert once.parts["worker_startup"] == 0 and not [a for a in ledger_advice(once) if a.part == "worker_startup"]

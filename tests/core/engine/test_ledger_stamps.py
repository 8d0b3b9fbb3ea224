"""The ledger's clock readings in the step record's description (``core/engine/ledger_stamps.py``), on a fake clock."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
from torch.utils.data import DataLoader

from perf_callbacks.analysis.diff.steps import read_run
from perf_callbacks.analysis.ledger.parts import rank_ledger
from perf_callbacks.analysis.ledger.text import summary_line
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.engine import ledger_stamps
from perf_callbacks.core.engine.step_log import StepLog
from perf_callbacks.core.process_start import process_age_s
from tests.core.engine_helpers import FakeClock, fake_steps, make_engine


def test_the_readings_at_close_place_start_up_steps_set_aside_time_and_after_on_the_engines_clock(
        tmp_path: Path) -> None:
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        engine = make_engine(tmp_path, schedule={"skip_first": 1000})
        clock.t += 2.0  # start-up after the engine's construction
        fake_steps(engine, clock, 4, wait=0.1, work=0.4)
        engine.checkpoint_start()
        clock.t += 0.5
        engine.checkpoint_end()
        clock.t += 0.3  # the framework's end of training
        engine.close()
    st = json.loads((engine.run_dir / "steps-rank0.json").read_text())["ledger"]
    assert st["first_step_s"] == pytest.approx(2.0) and st["close_begin_s"] == pytest.approx(4.8)
    assert st["open_step"] == {"step": 3, "ended": True, "begin_s": pytest.approx(3.5), "elapsed_s": pytest.approx(0.5),
                               "wait_s": pytest.approx(0.1), "aside_s": pytest.approx(0.5), "own_s": 0.0}
    assert st["set_aside"]["checkpoint"] == pytest.approx(0.5) and st["set_aside_count"]["checkpoint"] == 1
    [record] = read_run(engine.run_dir)
    led = rank_ledger(record)
    assert led is not None and led.steps == 4
    assert led.parts["startup"] == pytest.approx(2.0) and led.parts["checkpoint"] == pytest.approx(0.5)
    assert led.parts["productive"] == pytest.approx(4 * 0.4) and led.parts["data_wait"] == pytest.approx(4 * 0.1)
    assert led.parts["after"] == pytest.approx(0.3) and led.parts["unaccounted"] == pytest.approx(0.0, abs=1e-6)


def test_set_aside_time_before_the_first_step_is_start_up_not_a_part(tmp_path: Path) -> None:
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        engine = make_engine(tmp_path, schedule={"skip_first": 1000})
        engine.validation_start()  # a sanity check before training
        clock.t += 1.0
        engine.validation_end()
        assert engine.aside.totals["validation"] == 0 and engine.aside.counts["validation"] == 0
        fake_steps(engine, clock, 2, wait=0.0, work=0.1)
        engine.close()
    [record] = read_run(engine.run_dir)
    led = rank_ledger(record)
    assert led is not None and led.parts["evaluation"] == 0 and led.parts["startup"] == pytest.approx(1.0)


def test_an_epoch_boundary_and_its_loader_are_noted_and_a_strange_loader_is_never_an_error(tmp_path: Path) -> None:
    log = StepLog(tmp_path, RunContext(tmp_path, "run"))
    log.epoch_start(None, DataLoader(list(range(4)), num_workers=2, persistent_workers=True))
    log.epoch_start(7, object())

    class Broken:
        @property
        def flattened(self) -> list[object]:
            raise RuntimeError("no")

    log.epoch_start(9, Broken())
    assert log.stamps["epoch_starts"] == [None, 7, 9]
    assert log.stamps["loader"] == {"num_workers": 2, "persistent_workers": True}


def test_the_process_age_is_read_and_counts_back_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_stamps, "_CLOSED", [])  # the process' first run
    age = process_age_s()
    assert age is not None and age > 0  # pytest has run for a while
    assert "process_start_s" in StepLog(Path("x"), RunContext(Path("x"), "run")).stamps


def test_a_later_run_of_the_process_starts_where_the_run_before_it_ended(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep, several fits, a test suite: the time before the previous run's end is that run's, not start-up."""
    monkeypatch.setattr(ledger_stamps, "_CLOSED", [])
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        first = make_engine(tmp_path / "first", schedule={"skip_first": 1000})
        fake_steps(first, clock, 3, wait=0.0, work=1.0)
        first.close()
        clock.t += 7.0  # the next trial's model is built
        second = make_engine(tmp_path / "second", schedule={"skip_first": 1000})
        clock.t += 2.0  # the callback is made before training starts
        fake_steps(second, clock, 3, wait=0.0, work=1.0)
        second.close()
    one, two = (rank_ledger(read_run(e.run_dir)[0]) for e in (first, second))
    assert one is not None and one.origin == "process"
    assert two is not None and two.origin == "previous_run"
    assert two.parts["startup_before"] + two.parts["startup"] == pytest.approx(9.0, abs=1e-6)
    assert two.wall_s == pytest.approx(9.0 + 3.0 + two.parts["own"], abs=0.5)


def test_the_console_line_comes_at_a_clean_end_only_and_a_failed_run_keeps_its_ledger(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        ok = make_engine(tmp_path / "ok", schedule={"skip_first": 1000})
        fake_steps(ok, clock, 3, wait=0.0, work=1.0)
        ok.close()
        failed = make_engine(tmp_path / "failed", schedule={"skip_first": 1000})
        fake_steps(failed, clock, 3, wait=0.0, work=1.0)
        failed.close(ValueError("user error"))
    lines = [x for x in capsys.readouterr().err.splitlines() if "goodput" in x]
    assert lines == [f"perf-callbacks: {summary_line(rank_ledger(read_run(ok.run_dir)[0]))} -> {ok.run_dir}"]
    led = rank_ledger(read_run(failed.run_dir)[0])
    assert led is not None and led.steps == 3 and led.parts["productive"] == pytest.approx(3.0)


def test_an_interactive_session_starts_the_ledger_at_the_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook's kernel lived long before the run: its time is the person's, so the ledger leaves it out."""
    import sys

    from perf_callbacks.core.engine.ledger_stamps import start_stamps

    monkeypatch.setattr(ledger_stamps, "_CLOSED", [])
    assert "process_start_s" in start_stamps()  # pytest: a script
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    assert start_stamps() == {"engine_s": 0.0, "interactive": True}

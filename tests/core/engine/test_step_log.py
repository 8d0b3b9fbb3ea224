"""The run-wide step record (``core/engine/step_log.py``), written by a real engine on a fed clock, read back by
``analysis/diff/steps.py``."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest

from perf_callbacks.analysis.diff.steps import COMPILED, WINDOW, compared_steps, read_run
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.engine.step_log import StepLog
from tests.core.engine_helpers import FakeClock, fake_steps, make_engine, run_steps


def test_every_step_is_recorded_with_its_time_samples_wait_and_time_set_aside(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 1000}, data_wait_steps=1000)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        for step in range(12):
            fake_steps(engine, clock, 1, wait=0.01, work=0.09, start=step)
            if step % 2:
                engine.checkpoint_start()  # a checkpoint after every other step: set aside, and recorded as such
                clock.t += 0.3
                engine.checkpoint_end()
        fake_steps(engine, clock, 1, wait=0.01, work=0.09, start=12)  # the step that ends the last measured one
    engine.close()
    [r] = read_run(tmp_path)
    assert r.step[:12] == list(range(12))
    assert r.time_s[:12] == pytest.approx([0.1] * 12, abs=1e-6)
    assert r.wait_s[:12] == pytest.approx([0.01] * 12, abs=1e-6)
    assert r.samples[:12] == [10] * 12
    assert [a > 0.29 for a in r.aside_s[:12]] == [bool(s % 2) for s in range(12)]
    assert not any(r.flags)
    assert r.meta["columns"] == ["step", "time_s", "samples", "wait_s", "aside_s", "flags"]
    assert r.meta["machine"]["cpu_cores"] >= 1 and r.meta["machine"]["world_size"] == 1 and r.meta["machine"]["torch"]


def test_profiled_steps_are_flagged_and_left_out_with_the_warm_up(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)  # a window at steps 4-5 (tests/core/engine_helpers.SCHEDULE)
    run_steps(engine, 30)
    engine.close()
    [r] = read_run(tmp_path)
    flagged = [int(s) for s, f in zip(r.step, r.flags, strict=True) if f]
    assert flagged == [0, 3, 4, 5] and all(f == WINDOW for f in r.flags if f)  # FLOP-counted, profiler warm-up, window
    compared = compared_steps(r)
    assert min(compared.step) == 6 and len(compared.step) == len(r.step) - 6  # warm-up (0-2), flagged (3-5) left out
    assert COMPILED not in r.flags


def test_the_record_is_written_at_logging_steps_once_its_time_has_come_and_at_close(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 1000})  # logs every 5 steps
    run_steps(engine, 11)
    assert read_run(tmp_path) == []  # FLUSH_S (30 s) not passed, FLUSH_ROWS not waiting: a logging step stays cheap
    engine.steps.every_s = 0.0
    run_steps(engine, 10, start=11)
    [r] = read_run(tmp_path)
    assert len(r.time_s) == 19  # steps 0-18: measured when the next began, written at the logging step of step 20
    engine.close()
    [r] = read_run(tmp_path)
    assert len(r.time_s) == 20  # at close: steps 0-19 (the last, which no step follows, is not measured)


def test_a_long_run_keeps_its_last_steps_whole_and_summarises_the_older_ones(tmp_path: Path) -> None:
    log = StepLog(tmp_path, RunContext(tmp_path, "run"), keep=300)
    for step in range(1000):
        log.rows.append((step, 0.01 + step * 1e-5, 8, 0.0, 0.0, 0))
        if step % 50 == 49:
            log.flush()
    [r] = read_run(tmp_path)
    assert 300 <= len(r.step) < 600 and r.step[-1] == 999 and r.step == list(range(1000 - len(r.step), 1000))
    early = (tmp_path / "steps-rank0-early.f32").stat().st_size // 24
    assert early * 100 == 1000 - len(r.step)  # one row per 100 older steps
    assert json.loads((tmp_path / "steps-rank0.json").read_text())["steps"] == len(r.step)


def test_a_record_that_cannot_be_written_turns_itself_off_and_training_goes_on(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 1000})
    with mock.patch.object(StepLog, "_write", side_effect=OSError(28, "No space left on device")):
        run_steps(engine, 12)  # two logging steps: one failure, then off (no PerfWarning: the test would fail)
        engine.close()
    assert engine.steps.off and read_run(tmp_path) == []

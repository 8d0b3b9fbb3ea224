"""Phase and checkpoint spans, where a step begins, and the handler given to atexit: the engine driven by hand."""

from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

import pytest
import torch

from perf_callbacks.core.engine import closing
from tests.core.engine_helpers import FakeClock, fake_steps, make_engine, run_steps, spans


def test_a_phase_span_ends_where_its_phase_ends(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    run_steps(engine, 4)
    engine.batch_start(4)
    held = engine.phases.span  # a handle kept alive (torch's record_function, or a reference) is not closed by GC
    engine.phase("backward")  # ends the forward phase
    engine.phase("optimizer_step")
    engine.batch_end(stepped=True)
    run_steps(engine, 1, start=5)
    engine.close()
    (path,) = engine.exported
    (forward,) = [e for e in spans(path, "perf_callbacks.forward") if e["ts"] < spans(path, "ProfilerStep#5")[0]["ts"]]
    (backward,) = spans(path, "perf_callbacks.backward")
    assert forward["ts"] + forward["dur"] <= backward["ts"] and held is not None


def test_a_checkpoint_span_in_a_window_ends_with_the_checkpoint(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    run_steps(engine, 5)  # step 4, the window's first, completed
    engine.checkpoint_start()
    held = engine.phases.ckpt_span  # as above: only checkpoint_end may close it
    engine.checkpoint_end()
    run_steps(engine, 1, start=5)
    engine.close()
    (path,) = engine.exported
    (ckpt,), (step5,) = spans(path, "perf_callbacks.checkpoint"), spans(path, "ProfilerStep#5")
    assert ckpt["ts"] + ckpt["dur"] <= step5["ts"] and held is not None


def test_a_checkpoint_interrupted_by_an_exception_in_a_window_has_its_span_closed_at_close(tmp_path: Path) -> None:
    """torch closes a span left open when its profiler stops, so the trace cannot tell: close() must exit it itself."""
    engine = make_engine(tmp_path)
    run_steps(engine, 5)
    engine.checkpoint_start()  # the save raises
    handle = engine.phases.ckpt_span
    assert handle is not None
    with mock.patch.object(closing, "exit_span", wraps=closing.exit_span) as exit_span:
        engine.close(OSError("disk full"))
    assert mock.call(handle) in exit_span.call_args_list
    assert len(spans(engine.exported[0], "perf_callbacks.checkpoint")) == 1


def test_an_abandoned_step_begins_a_new_step_and_is_not_measured(tmp_path: Path) -> None:
    """Step 2 runs a micro-batch but no optimizer step (the loop `continue`s, a resumed count moves on): not timed."""
    engine = make_engine(tmp_path, schedule={"skip_first": 1000}, data_wait_steps=1000, flops=False)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        fake_steps(engine, clock, 2, wait=0.0, work=0.1)
        engine.batch_start(2)
        clock.t += 5.0
        engine.batch_end(stepped=False)
        engine.batch_start(3)
        assert engine.step == 3
        clock.t += 0.1
        engine.batch_end(stepped=True)
        engine.batch_start(4)
    assert engine.monitor.stats.step_times == [pytest.approx(0.1)] * 3


def test_a_step_whose_number_is_not_yet_known_begins_at_its_first_fetch(tmp_path: Path) -> None:
    """Two fetches before the first batch (the loader's first try came back empty): step 0 lasts from the first."""
    engine = make_engine(tmp_path, schedule={"skip_first": 1000}, data_wait_steps=1000, flops=False)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        engine.data_start()
        clock.t += 1.0
        engine.data_end()
        engine.data_start()
        clock.t += 0.01
        engine.data_end()
        engine.batch_start(0)
        clock.t += 0.1
        engine.batch_end(stepped=True)
        engine.data_start()  # step 1 begins
    assert engine.monitor.stats.step_times == [pytest.approx(1.11)]


def test_the_exit_handler_closes_an_engine_never_closed_with_the_exception_ending_the_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler given to atexit, called as the interpreter would (no process exits here): step 5 was interrupted
    by an uncaught exception (``sys.last_value``), so it stays in the window's trace, as close(exc) keeps it."""
    with mock.patch.object(closing.atexit, "register") as register:
        engine = make_engine(tmp_path)
    (handler,), _ = register.call_args
    run_steps(engine, 5)
    engine.batch_start(5)
    monkeypatch.setattr(sys, "last_value", RuntimeError("uncaught"), raising=False)
    handler()
    assert [p.parent.name for p in engine.exported] == ["window-000004-000005"]
    assert not torch.autograd.profiler._is_profiler_enabled

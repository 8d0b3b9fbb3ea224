"""Behaviour that only mutation testing showed untested (docs/mutation-survivors.md): the engine driven by hand."""

from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine import engine as engine_module
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.windows.profiler import ProfilerSession
from perf_callbacks.core.windows.summary import console_text, window_line
from perf_callbacks.exceptions import InstrumentUnavailableWarning, TraceSizeWarning
from tests.core.engine_helpers import FakeClock, fake_steps, make_engine, run_steps, trace_events

SCHEDULE = {"skip_first": 2, "wait": 1, "warmup": 1, "active": 2}  # make_engine's: warm-up at 3, window 4-5


def spans(path: Path, name: str) -> list[dict]:
    return [e for e in trace_events(path) if e.get("name") == name]


def ours_in(prof: torch.profiler.profile) -> list[str]:
    return [e.name for e in prof.events() if e.name.startswith("perf_callbacks.")]


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
    with mock.patch.object(engine_module, "exit_span", wraps=engine_module.exit_span) as exit_span:
        engine.close(OSError("disk full"))
    assert mock.call(handle) in exit_span.call_args_list
    assert len(spans(engine.exported[0], "perf_callbacks.checkpoint")) == 1


def test_steps_we_do_not_record_open_no_spans_in_another_profilers_trace(tmp_path: Path) -> None:
    """Steps before any window, and a window we stand aside for: the user's trace holds none of our spans."""
    engine = make_engine(tmp_path)
    with warnings.catch_warnings(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        warnings.simplefilter("ignore", InstrumentUnavailableWarning)
        run_steps(engine, 7)  # steps 0-2 outside windows, warm-up at 3 and window 4-5 left to the user's
    engine.close()
    assert ours_in(prof) == [] and engine.windows.stood_aside


def test_a_profiler_started_during_our_warm_up_step_gets_none_of_our_spans(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    run_steps(engine, 3)
    engine.data_start()  # step 3, our warm-up, begins
    engine.data_end()
    engine.batch_start(3)
    with warnings.catch_warnings(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        warnings.simplefilter("ignore", InstrumentUnavailableWarning)
        engine.phase("backward")
        engine.batch_end(stepped=True)
        run_steps(engine, 3, start=4)  # our window 4-5: we stand aside
    engine.close()
    assert ours_in(prof) == [] and engine.exported == []


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


def test_the_first_interval_feeds_the_slowdown_check_and_a_short_runs_does_not(tmp_path: Path) -> None:
    for steps, checked in ((6, True), (3, False)):
        engine = make_engine(tmp_path / str(steps), schedule={"skip_first": 1000}, data_wait_steps=1000, flops=False)
        clock = FakeClock()
        with mock.patch("time.perf_counter", clock), \
                mock.patch.object(engine.monitor.degradation, "check", return_value=None) as check:
            fake_steps(engine, clock, steps, wait=0.0, work=0.1)  # 6: logged at step 5; 3: logged at close
            engine.close()
        assert check.called is checked, steps


def test_the_trace_size_warning_is_said_in_full_on_every_rank(tmp_path: Path) -> None:
    cfg = PerfConfig.from_dict({"schedule": SCHEDULE, "summary": False, "max_trace_mb": 0.0001})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", rank=1, world_size=2, log_every_n_steps=5))
    with pytest.warns(TraceSizeWarning) as caught:
        run_steps(engine, 7)
        engine.close()
    (message,) = [str(w.message) for w in caught]
    assert re.fullmatch(
        r"perf-callbacks: the trace of steps 4-5 on rank 1 is \d+\.\d KB \(0\.0\d+ MB\), above max_trace_mb=0.0001; it was not written. "
        "Lower schedule.active, turn off with_stack/record_shapes/profile_memory, or raise max_trace_mb", message)


def test_a_window_that_fails_to_start_stops_its_session_and_records_nothing(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    with mock.patch.object(ProfilerSession, "mark_step", side_effect=RuntimeError("kineto said no")), \
            pytest.warns(InstrumentUnavailableWarning, match="profiler disabled: RuntimeError: kineto said no; training continues"):
        run_steps(engine, 4)
        engine.data_start()  # step 4: the session starts, then fails
        assert not torch.autograd.profiler._is_profiler_enabled
        assert engine.phases.recording is False and not engine.windows.enabled
    engine.close()
    assert engine.exported == []


def summary_engine(tmp_path: Path, rank: int = 0, **options: object) -> tuple[PerfEngine, list, list]:
    texts: list = []
    scalars: list = []
    cfg = PerfConfig.from_dict({"schedule": SCHEDULE, "summary": True, **options})
    ctx = RunContext(output_dir=tmp_path, run_name="run", rank=rank, world_size=2 if rank else 1,
                     log_every_n_steps=1000, log_summary=lambda m, s: scalars.append((s, m)),
                     log_text=lambda tag, text, s: texts.append((tag, text, s)))
    return PerfEngine(cfg, ctx), texts, scalars


@pytest.mark.parametrize("verbose", [False, True])
def test_the_reporting_rank_publishes_its_windows_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          verbose: bool) -> None:
    """One line on the console (the whole summary when verbose), the text and scalars logged at the step after."""
    engine, texts, scalars = summary_engine(tmp_path, verbose=verbose)
    run_steps(engine, 7)
    engine.close()
    (path,) = engine.exported
    summary = (path.parent / "summary.txt").read_text()
    assert engine.windows.summaries == [summary]
    assert texts == [("perf/window/summary", f"```\n{summary}```", 6)]
    ((step, figures),) = scalars
    assert step == 6 and figures and all(k.startswith("perf/window/") for k in figures)
    side = json.loads((path.parent / "rank0.summary.json").read_text())
    line = window_line(side["console"], {"window": [4, 5], "partial": False}, path.parent)
    assert line.startswith(f"perf-callbacks: steps 4-5 {side['verdict']}: ")
    assert capsys.readouterr().out == (console_text(summary) if verbose else line) + "\n"


def test_a_summary_logger_that_raises_turns_the_engines_metrics_writer_off(tmp_path: Path) -> None:
    engine, _, _ = summary_engine(tmp_path)
    engine.ctx.log_text = mock.Mock(side_effect=OSError("tracker gone"))
    with pytest.warns(InstrumentUnavailableWarning, match="tracker gone"):
        run_steps(engine, 7)
        engine.close()
    assert not engine.outputs.enabled("metrics")


def test_only_the_lowest_rank_traced_reports_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine, texts, scalars = summary_engine(tmp_path, rank=1)
    run_steps(engine, 7)
    engine.close()
    (path,) = engine.exported  # rank 1 records its window, analysed for its sidecar...
    assert not (path.parent / "summary.txt").exists()  # ...but rank 0 reports
    assert engine.windows.summaries == texts == scalars == [] and capsys.readouterr().out == ""


def test_the_exit_handler_closes_an_engine_never_closed_with_the_exception_ending_the_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler given to atexit, called as the interpreter would (no process exits here): step 5 was interrupted
    by an uncaught exception (``sys.last_value``), so it stays in the window's trace, as close(exc) keeps it."""
    with mock.patch.object(engine_module.atexit, "register") as register:
        engine = make_engine(tmp_path)
    (handler,), _ = register.call_args
    run_steps(engine, 5)
    engine.batch_start(5)
    monkeypatch.setattr(sys, "last_value", RuntimeError("uncaught"), raising=False)
    handler()
    assert [p.parent.name for p in engine.exported] == ["window-000004-000005"]
    assert not torch.autograd.profiler._is_profiler_enabled


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


def test_a_memory_reading_that_raises_turns_the_metrics_off_with_one_warning(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, [], schedule={"skip_first": 1000}, flops=False)
    assert engine.memory is not None
    with mock.patch.object(engine.memory, "sample", side_effect=OSError("NVML gone")), \
            pytest.warns(InstrumentUnavailableWarning) as caught:
        run_steps(engine, 6)  # logged at step 5
    assert [str(w.message) for w in caught] == [
        "perf-callbacks: metrics disabled: OSError: NVML gone; training continues"]
    assert engine.memory is None and not engine.outputs.enabled("metrics")

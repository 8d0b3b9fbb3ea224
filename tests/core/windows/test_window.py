"""Profiling windows (``core/windows/recorder.py``) driven through the engine, as an adapter would."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.windows import handoff
from perf_callbacks.core.windows.profiler import ProfilerSession
from perf_callbacks.exceptions import InstrumentUnavailableWarning, TraceSizeWarning
from tests.core.engine_helpers import SCHEDULE, make_engine, ours_in, run_steps, trace_steps

ROOT = Path(__file__).resolve().parents[3]

# A user's own torch.profiler, started and stopped inside one step of our window, stops ours too (torch has one
# profiler state). Touching our session after that (stopping it, exporting it) crashes inside torch: a segfault, so
# the run is a separate process.
USER_PROFILER_IN_OUR_WINDOW = """
import sys, warnings
import torch
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.exceptions import InstrumentUnavailableWarning

out, theirs = sys.argv[1], int(sys.argv[2])
cfg = PerfConfig.from_dict({"schedule": {"skip_first": 2, "wait": 0, "warmup": 1, "active": 3}, "summary": False})
engine = PerfEngine(cfg, RunContext(output_dir=out, run_name="run", log_every_n_steps=5))
x = torch.randn(8, 8, requires_grad=True)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for step in range(8):  # warm-up at step 2, window 3-5
        engine.data_start()
        engine.data_end()
        engine.batch_start(step)
        if step == theirs:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
                (x @ x).sum().backward()
        else:
            (x @ x).sum().backward()
        engine.batch_end(stepped=True, samples=8)
    engine.close()
ours = [str(w.message) for w in seen if issubclass(w.category, InstrumentUnavailableWarning)]
print("WARNINGS", len(ours), "|".join(ours))
print("EXPORTED", len(engine.exported), "PROFILER_ON", torch.autograd.profiler._is_profiler_enabled)
"""


@pytest.mark.slow  # a process each (torch's import): about 10 s
@pytest.mark.parametrize("theirs", [4, 5], ids=["mid-window", "last-step"])
def test_a_user_profiler_in_any_step_of_our_window_is_survived(tmp_path: Path, theirs: int) -> None:
    """In the window's last step, ours is stopped at that step's end (``finish``), not at the next step's begin."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", USER_PROFILER_IN_OUR_WINDOW, str(tmp_path), str(theirs)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    (warned,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("WARNINGS")]
    assert warned.startswith("WARNINGS 1 ") and "another torch.profiler was started and stopped" in warned
    assert "window (steps 3-5)" in warned
    assert "EXPORTED 0 PROFILER_ON False" in proc.stdout


def test_an_exception_in_a_windows_first_step_exports_that_step(tmp_path: Path) -> None:
    """E.g. an out-of-memory error the profiler caused: no step of the window completed, but the trace shows where."""
    engine = make_engine(tmp_path, summary=True)
    run_steps(engine, 4)  # steps 0-3: warm-up at 3, window 4-5
    engine.data_start()
    engine.data_end()
    engine.batch_start(4)  # fails in its forward
    engine.close(RuntimeError("CUDA out of memory"))
    (path,) = engine.exported
    assert path.parent.name == "window-000004-000004" and trace_steps(path) == [4]
    assert "interrupted by RuntimeError)" in (path.parent / "summary.txt").read_text()


def test_a_failed_export_turns_the_profiler_off_for_the_rest_of_the_run(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 1, "repeat": 0})
    running = []
    with mock.patch("gzip.GzipFile.write", side_effect=OSError(28, "No space left on device")), \
            pytest.warns(InstrumentUnavailableWarning, match="profiler disabled.*No space left"):
        run_steps(engine, 4)  # warm-up at 2, window 3: compressed in the background, which fails
        engine.windows.wait(120)  # the failure is reported (else at the next step's begin, whenever the job ends)
        for step in range(4, 12):  # warm-ups at 4, 6, 8, 10 and windows at 5, 7, 9, 11, had it stayed on
            run_steps(engine, 1, start=step)
            running.append(engine.windows.session is not None or torch.autograd.profiler._is_profiler_enabled)
    assert not engine.windows.enabled and running == [False] * 8  # before close(), which turns it off anyway
    engine.close()
    assert engine.exported == [] and not list(tmp_path.rglob("*.gz"))


def test_standing_aside_for_another_profiler_is_not_a_run_too_short(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The only window fell while the user's profiler ran: we said so (a warning); 'lower skip_first' would be wrong."""
    engine = make_engine(tmp_path)  # one window: 4-5
    with pytest.warns(InstrumentUnavailableWarning, match="stands aside and records no trace for steps 4-5"), \
            torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        run_steps(engine, 8)
    engine.close()
    assert engine.exported == [] and engine.windows.stood_aside
    assert "no profiling window was recorded" not in capsys.readouterr().err


def test_standing_aside_is_said_on_every_rank_and_in_full(tmp_path: Path) -> None:
    """A user's profiler may run on one rank only: the rank that stands aside says so itself, not only rank 0."""
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 2, "wait": 1, "warmup": 1, "active": 2}, "summary": False})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", rank=1, world_size=2, log_every_n_steps=5))
    with warnings.catch_warnings(record=True) as caught, \
            torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        warnings.simplefilter("always")
        run_steps(engine, 6)  # found at step 3, our warm-up for the window 4-5
    engine.close()
    ours = [str(w.message) for w in caught if issubclass(w.category, InstrumentUnavailableWarning)]
    assert ours == ["perf-callbacks: another torch.profiler is already running at step 3 (your own "
                    "torch.profiler.profile, Trainer(profiler='pytorch'), or a second perf-callbacks instance); "
                    "perf-callbacks stands aside and records no trace for steps 4-5. NVTX ranges and metrics go on"]


@pytest.mark.parametrize("end", ["exception-in-warm-up", "clean-close-after-the-windows-first-fetch"])
def test_a_window_with_no_step_to_export_exports_nothing_and_says_nothing(tmp_path: Path, end: str) -> None:
    """A warm-up step interrupted by an exception (the session was only prepared), or a clean close whose window's only
    step never completed (retracted): nothing to export, and no 'profiler disabled' failure either."""
    engine = make_engine(tmp_path)  # warm-up at 3, window 4-5
    run_steps(engine, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if end == "exception-in-warm-up":
            engine.data_start()
            engine.data_end()
            engine.batch_start(3)
            engine.close(RuntimeError("in the warm-up step"))
        else:
            run_steps(engine, 1, start=3)
            engine.data_start()  # step 4, the window's first, begins at its fetch, which finds no batch
            engine.close()
    assert [str(w.message) for w in caught if issubclass(w.category, InstrumentUnavailableWarning)] == []
    assert engine.exported == [] and not list(tmp_path.rglob("*.gz"))


def test_a_run_whose_windows_were_all_exported_prints_no_nothing_recorded_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = make_engine(tmp_path)  # one window: 4-5, exported (its job done) by the time close() asks
    run_steps(engine, 8)
    engine.close()
    assert len(engine.exported) == 1 and engine.windows.handoff.jobs == []
    assert "no profiling window was recorded" not in capsys.readouterr().err


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("fetch", [True, False], ids=["fetch-timed", "no-loader-timing"])
def test_a_windows_metadata_holds_its_steps_rank_stall_and_data_wait(tmp_path: Path, fetch: bool) -> None:
    """The metadata handed to the window's job (stored in its sidecar): a full window is not partial; the export's
    fed 250.4321 ms is its stall (to 2 decimals); without loader timing, data wait is 'not measured'."""
    engine = make_engine(tmp_path)  # warm-up at 3, window 4-5
    clock = FakeClock()
    real_export_raw = handoff.export_raw

    def slow_export_raw(*args: object) -> Path:
        clock.t += 0.2504321  # a large trace's export
        return real_export_raw(*args)  # type: ignore[arg-type]

    with mock.patch("time.perf_counter", clock), mock.patch.object(handoff, "export_raw", slow_export_raw):
        for step in range(6):
            if fetch:
                engine.data_start()
                engine.data_end()
            engine.batch_start(step)
            clock.t += 0.1
            engine.batch_end(stepped=True, samples=8)
    meta = engine.windows.handoff.jobs[-1].meta  # handed over at step 5's end; the next step's begin would collect it
    engine.close()
    expected = {"window": [4, 5], "planned": [4, 5], "steps": [4, 5], "partial": False, "interrupted": None,
                "rank": 0, "stall_ms": 250.43}
    so_far = meta.pop("ledger_so_far")  # the sidecar's ledger so far (tests/integrations/test_ledger_sidecar.py)
    assert so_far["close_s"] - so_far["close_begin_s"] == pytest.approx(0.2504321)  # the export: our own work
    assert so_far["open_step"]["step"] == 5 and so_far["record"].endswith("steps-rank0.f32")
    assert meta == (expected if fetch else {**expected, "data_wait": "not measured"})


def test_a_window_that_starts_after_its_planned_first_step_is_partial(tmp_path: Path) -> None:
    """A run resumed at step 5 holds only the last step of the window 4-5."""
    engine = make_engine(tmp_path)
    run_steps(engine, 1, start=5)
    meta = engine.windows.handoff.jobs[-1].meta
    engine.close()
    assert (meta["window"], meta["planned"], meta["partial"]) == ([5, 5], [4, 5], True)


class HeldJob:
    """A window's background job that never finishes (a summary stuck on a slow disk): ``join`` waits its whole timeout."""

    def __init__(self, dest: Path, clock: FakeClock) -> None:
        self.dest, self.clock, self.joins = dest, clock, []

    def join(self, timeout: float | None = None) -> None:
        self.joins.append(timeout)
        self.clock.t += timeout or 0.0

    def is_alive(self) -> bool:
        return True


def test_waiting_for_jobs_is_bounded_in_all_and_names_the_jobs_left(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    engine = make_engine(tmp_path)
    clock = FakeClock()
    jobs = [HeldJob(tmp_path / f"window-00000{i}-00000{i}" / "rank0.pt.trace.json.gz", clock) for i in (4, 8)]
    engine.windows.handoff.jobs = list(jobs)
    with mock.patch("time.monotonic", clock):
        engine.windows.wait(5.0)
    assert [j.joins for j in jobs] == [[5.0], [0.0]]  # the second gets what is left of the 5 s: nothing
    err = capsys.readouterr().err
    for i in (4, 8):
        assert (f"perf-callbacks: the summary of {tmp_path / f'window-00000{i}-00000{i}'} is still being written in "
                "the background\n") in err
    engine.windows.handoff.jobs = []  # nothing real to wait for at close
    engine.close()


def test_each_exported_trace_is_logged_at_info(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine(tmp_path)  # one window: 4-5
    with caplog.at_level(logging.INFO, logger="perf_callbacks.core.windows.recorder"):
        run_steps(engine, 7)
        engine.close()
    (path,) = engine.exported
    assert [r.getMessage() for r in caplog.records if r.name == "perf_callbacks.core.windows.recorder"] == [
        f"perf-callbacks: trace written to {path}"]


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

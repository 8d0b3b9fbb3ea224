"""The engine without any framework: steps are driven by hand, as an adapter would."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.triggers.schedule import Action
from perf_callbacks.exceptions import (
    DataLoaderWarning,
    InstrumentUnavailableWarning,
    PerformanceDegradationWarning,
    TraceSizeWarning,
)
from tests.core import engine_helpers
from tests.core.engine_helpers import FakeClock, fake_steps, make_engine, run_steps, trace_events, trace_steps


def test_windows_follow_the_schedule_and_repeat(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 2, "wait": 1, "warmup": 1, "active": 2, "repeat": 2})
    run_steps(engine, 14)
    engine.close()
    assert [p.parent.name for p in engine.exported] == ["window-000004-000005", "window-000008-000009"]
    assert [trace_steps(p) for p in engine.exported] == [[4, 5], [8, 9]]
    assert all(p.name == "rank0.pt.trace.json.gz" for p in engine.exported)
    assert not torch.autograd.profiler._is_profiler_enabled


def test_gradient_accumulation_numbers_optimizer_steps(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    run_steps(engine, 8, accumulate=3)
    engine.close()
    (path,) = engine.exported
    assert trace_steps(path) == [4, 5]
    forwards = [e for e in trace_events(path) if e.get("name") == "perf_callbacks.forward"]
    assert len(forwards) == 2 * 3  # one forward phase per micro-batch, only inside the recorded steps


def test_trace_has_distributed_info_and_only_the_trace(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    run_steps(engine, 7)
    engine.close()
    (path,) = engine.exported
    assert json.load(gzip.open(path))["distributedInfo"] == {"backend": "", "rank": 0, "world_size": 1}
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_no_profiler_exists_or_runs_outside_windows(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 3, "wait": 2, "warmup": 1, "active": 2, "repeat": 2})
    in_window = {6, 7, 11, 12}  # warm-up steps 5 and 10 run the profiler too, discarding its events
    for step in range(16):
        run_steps(engine, 1, start=step)
        running = torch.autograd.profiler._is_profiler_enabled
        if step + 1 in in_window or step in in_window - {7, 12}:
            continue  # the session may legitimately live across these step boundaries
        assert engine.windows.session is None and not running, step
    engine.close()
    assert [trace_steps(p) for p in engine.exported] == [[6, 7], [11, 12]]


def test_untraced_rank_exports_nothing(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, ranks=[1])
    run_steps(engine, 8)
    engine.close()
    assert engine.exported == []


def test_exception_mid_window_flushes_partial_trace(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, summary=True)
    run_steps(engine, 5)  # steps 0-4: step 4, the first active one, completed
    engine.batch_start(5)  # step 5 fails half-way
    assert torch.autograd.profiler._is_profiler_enabled
    engine.close(RuntimeError("boom"))
    assert not torch.autograd.profiler._is_profiler_enabled
    (path,) = engine.exported
    assert path.parent.name == "window-000004-000005" and trace_steps(path) == [4, 5]
    assert "interrupted by RuntimeError)" in (path.parent / "summary.txt").read_text()
    engine.close()  # idempotent


def test_a_run_ending_just_before_a_window_leaves_no_phantom(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, summary=True)
    run_steps(engine, 4)  # steps 0-3; the window starts at step 4, which never runs
    engine.close()
    assert engine.exported == [] and not list(tmp_path.rglob("window-*"))


def test_a_run_ending_inside_a_window_exports_the_steps_it_ran_marked_partial(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, summary=True, schedule={"skip_first": 2, "wait": 1, "warmup": 1, "active": 3})
    run_steps(engine, 6)  # window 4-6 scheduled; steps 4 and 5 ran
    engine.close()
    (path,) = engine.exported
    assert path.parent.name == "window-000004-000005" and trace_steps(path) == [4, 5]
    summary = (path.parent / "summary.txt").read_text()
    assert "steps 4-5, rank 0 (partial: 2 of 3 scheduled steps completed)" in summary
    sidecar = json.loads((path.parent / "rank0.summary.json").read_text())
    assert sidecar["meta"]["partial"] is True and sidecar["meta"]["steps"] == [4, 5]


def test_a_last_fetch_that_finds_no_batch_leaves_no_phantom_step(tmp_path: Path) -> None:
    """Training ends at a fetch that found no batch (the loader ran out): that step never ran."""
    engine = make_engine(tmp_path, summary=True, schedule={"skip_first": 2, "wait": 1, "warmup": 1, "active": 3})
    run_steps(engine, 6)  # steps 4 and 5 of window 4-6 ran
    engine.data_start()  # step 6 begins at its fetch...
    engine.data_end()  # ...which raised StopIteration, and training ends
    engine.close()
    (path,) = engine.exported
    assert path.parent.name == "window-000004-000005" and trace_steps(path) == [4, 5]
    events = trace_events(path)
    (last,) = (e for e in events if e.get("name") == "ProfilerStep#5")
    assert not [e for e in events if e.get("name") == "perf_callbacks.data_wait" and e["ts"] >= last["ts"] + last["dur"]]
    sidecar = json.loads((path.parent / "rank0.summary.json").read_text())
    assert sidecar["meta"]["steps"] == [4, 5] and sidecar["meta"]["partial"] is True
    assert [s["step"] for s in sidecar["rank"]["steps"]] == [4, 5]  # the analysis saw the two steps that ran


def test_an_exception_at_a_fetch_keeps_the_interrupted_step(tmp_path: Path) -> None:
    """Not a phantom: the step's data loading raised, so the trace shows where (the step is kept)."""
    engine = make_engine(tmp_path, schedule={"skip_first": 2, "wait": 1, "warmup": 1, "active": 3})
    run_steps(engine, 5)
    engine.data_start()
    engine.data_end()
    engine.close(RuntimeError("corrupt sample"))
    (path,) = engine.exported
    assert path.parent.name == "window-000004-000005" and trace_steps(path) == [4, 5]


def test_repeat_zero_run_ending_between_windows_exports_only_real_windows(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 0, "wait": 0, "warmup": 1, "active": 2, "repeat": 0})
    run_steps(engine, 24)  # cycles of 3: windows 1-2, 4-5, ..., 22-23; step 24 would start the next warm-up
    engine.close()
    names = [p.parent.name for p in engine.exported]
    assert names[-1] == "window-000022-000023" and len(names) == 8
    assert all(trace_steps(p) == [int(p.parent.name[7:13]), int(p.parent.name[14:])] for p in engine.exported)


def test_data_wait_is_time_inside_the_dataloader_only(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 1000}, data_wait_steps=4)
    engine.ctx.data_loader = ("train_dataloader", 0)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock), pytest.warns(
        DataLoaderWarning, match=r"train_dataloader has num_workers=0; data loading took 30% of step time over steps 1-4"
    ):
        fake_steps(engine, clock, 6, wait=0.03, work=0.05, framework=0.02)
    (_, metrics) = logged[0]
    assert metrics["perf/train/step_time_ms"] == pytest.approx(100.0)  # framework time is step time...
    assert metrics["perf/train/data_wait_fraction"] == pytest.approx(0.3)  # ...but not data wait
    assert metrics["perf/train/samples_per_sec"] == pytest.approx(100.0)


def test_framework_time_between_batches_never_warns_about_the_loader(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, [], schedule={"skip_first": 1000}, data_wait_steps=4)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock), warnings.catch_warnings():
        warnings.simplefilter("error")
        fake_steps(engine, clock, 8, wait=0.0001, work=0.001, framework=0.0015)  # a DDP SIGTERM broadcast, say


def test_without_loader_timing_data_wait_is_not_reported(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 1000})
    for step in range(6):  # step 4's time is known when step 5 begins
        engine.batch_start(step)
        engine.batch_end(stepped=True)
    (_, metrics) = logged[0]
    assert "perf/train/step_time_ms" in metrics and "perf/train/data_wait_fraction" not in metrics


def test_validation_and_checkpoint_time_are_neither_step_time_nor_data_wait(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 1000}, data_wait_steps=1000)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        for step in range(6):
            fake_steps(engine, clock, 1, wait=0.01, work=0.09, start=step)
            engine.validation_start()
            clock.t += 5.0
            engine.validation_end()
            engine.checkpoint_start()  # e.g. ModelCheckpoint after the step
            clock.t += 3.0
            engine.checkpoint_end()
    (_, metrics) = logged[0]
    assert metrics["perf/train/step_time_ms"] == pytest.approx(100.0)
    assert metrics["perf/train/data_wait_fraction"] == pytest.approx(0.1)


def test_warm_up_and_profiled_steps_are_left_out_of_the_logged_interval(tmp_path: Path) -> None:
    """Profiling slows the steps it runs in (here by a fed 1 s): the interval holding the window logs the others."""
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 6, "wait": 0, "warmup": 1, "active": 2},
                         data_wait_steps=1000)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        for step in range(11):  # warm-up at step 6, window 7-8
            engine.data_start()
            clock.t += 0.01
            engine.data_end()
            engine.batch_start(step)
            clock.t += 0.09 + (1.0 if engine.windows.action is not Action.NONE else 0.0)
            engine.batch_end(stepped=True, samples=10)
    engine.close()
    assert [s for s, _ in logged] == [5, 10]
    window = logged[1][1]  # steps 4-8, of which 4 and 5 are measured
    assert window["perf/train/step_time_ms"] == pytest.approx(100.0)
    assert window["perf/train/samples_per_sec"] == pytest.approx(100.0)
    assert window["perf/train/data_wait_fraction"] == pytest.approx(0.1)


def test_export_and_logging_are_overhead_not_step_time(tmp_path: Path) -> None:
    """A 2 s export (in the window's step 1, which is left out as a profiled step anyway) and a 2 s metrics logger (in
    step 4, a measured step): both are overhead, and neither is step time nor data wait."""
    logged: list = []
    engine = make_engine(tmp_path, schedule={"skip_first": 1, "wait": 0, "warmup": 0, "active": 1},
                         data_wait_steps=1000)
    clock = FakeClock()
    real_export = engine.windows.handoff.export

    def slow_export(*args: Any, **kwargs: Any) -> None:
        clock.t += 2.0  # a large trace
        real_export(*args, **kwargs)

    def slow_logger(metrics: dict, step: int) -> None:
        clock.t += 2.0  # a slow tracker, or a cross-rank gather waiting for a slower rank
        logged.append(metrics)

    engine.ctx.log_metrics = slow_logger
    with mock.patch("time.perf_counter", clock), mock.patch.object(engine.windows.handoff, "export", slow_export):
        fake_steps(engine, clock, 11, wait=0.01, work=0.09)
    engine.close()
    assert len(logged) == 2  # at steps 5 (steps 0, 2, 3 measured) and 10 (steps 4-8, the first logging in step 4)
    for metrics in logged:
        assert metrics["perf/train/step_time_ms"] == pytest.approx(100.0)
        assert metrics["perf/train/samples_per_sec"] == pytest.approx(100.0)
        assert metrics["perf/train/data_wait_fraction"] == pytest.approx(0.1)
    assert logged[0]["perf/overhead/window_ms"] == pytest.approx(2000.0)
    assert logged[1]["perf/overhead/window_ms"] == 0.0
    assert logged[1]["perf/overhead/log_ms"] == pytest.approx(2000.0)  # the first logging's own time


def test_foreign_profiler_makes_it_stand_aside_once_then_it_records_again(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 2, "wait": 1, "warmup": 1, "active": 2, "repeat": 2})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            run_steps(engine, 7)  # the first window (4-5) would start while the user's profiler runs
        run_steps(engine, 7, start=7)  # the second (8-9) records
    engine.close()
    ours = [w for w in caught if issubclass(w.category, InstrumentUnavailableWarning)]
    assert len(ours) == 1 and "stands aside and records no trace for steps 4-5" in str(ours[0].message)
    assert ours[0].filename == engine_helpers.__file__  # the loop that drives the engine (run_steps), not the engine
    assert [trace_steps(p) for p in engine.exported] == [[8, 9]]


def test_a_profiler_started_during_our_warm_up_makes_us_stand_aside_for_that_window_only(tmp_path: Path) -> None:
    """Their start cancels our warm-up (Kineto says so on stderr): ours is dropped unstarted, theirs runs on."""
    engine = make_engine(tmp_path, schedule={"skip_first": 2, "wait": 1, "warmup": 1, "active": 2, "repeat": 2})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_steps(engine, 4)  # step 3 is our warm-up: our session is prepared, not started
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):  # the user's starts now
            run_steps(engine, 3, start=4)  # our window 4-5 would start while theirs runs
        run_steps(engine, 7, start=7)  # the next window (8-9) records
    engine.close()
    ours = [str(w.message) for w in caught if issubclass(w.category, InstrumentUnavailableWarning)]
    assert len(ours) == 1 and "stands aside and records no trace for steps 4-5" in ours[0], ours
    assert "already running at step 4 " in ours[0]  # found at the window's first step, after our warm-up
    assert [trace_steps(p) for p in engine.exported] == [[8, 9]]


def test_two_engines_in_one_loop_never_raise(tmp_path: Path) -> None:
    schedule = {"skip_first": 0, "wait": 0, "warmup": 0, "active": 3}
    a = make_engine(tmp_path / "a", schedule=schedule)
    b = make_engine(tmp_path / "b", schedule=schedule)
    x = torch.randn(8, 8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InstrumentUnavailableWarning)
        for step in range(6):
            for engine in (a, b):
                engine.data_start()
                engine.data_end()
                engine.batch_start(step)
                engine.phase("backward")
            (x @ x).sum().backward()
            for engine in (b, a):
                engine.batch_end(stepped=True)
    a.close()
    b.close()
    assert [trace_steps(p) for p in a.exported] == [[0, 1, 2]] and b.exported == []
    assert not torch.autograd.profiler._is_profiler_enabled


def test_trace_size_cap_skips_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The size is said with the precision of the cap (KB here, not '0 MB'), and the end of the run says the window
    was recorded and dropped for its size, not that the schedule started too late."""
    engine = make_engine(tmp_path, max_trace_mb=0.0001)
    with pytest.warns(TraceSizeWarning, match=r"steps 4-5 on rank 0 is \d+\.\d KB \(0\.0\d+ MB\), above "
                                              "max_trace_mb=0.0001; it was not written"):
        run_steps(engine, 7)
    engine.close()
    no_trace, ledger = capsys.readouterr().err.splitlines()  # the ledger's line last
    assert ledger.startswith("perf-callbacks: ") and "goodput" in ledger
    assert no_trace + "\n" == (
        "perf-callbacks: no trace was written: the profiling window (steps 4-5) was recorded, but its trace was above "
        "max_trace_mb=0.0001 and dropped. Raise max_trace_mb, or make the trace smaller: lower schedule.active, turn "
        "off with_stack/record_shapes/profile_memory.\n")
    assert engine.exported == []
    assert not [p for p in tmp_path.rglob("*.json*") if not p.name.startswith("steps-rank")]  # the step record's
    assert not list(tmp_path.rglob("*.partial"))


def test_export_failure_disables_profiler_and_training_goes_on(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 1, "repeat": 0})
    with mock.patch("gzip.GzipFile.write", side_effect=OSError(28, "No space left on device")), \
            pytest.warns(InstrumentUnavailableWarning, match=r"profiler disabled: No space left on device \(ENOSPC\): "
                         r".*/rank0\.pt\.trace\.json\.gz; training continues"):
        run_steps(engine, 12)
        engine.close()
    assert engine.exported == []  # that no later window starts a profiler: test_window.py (close() turns it off anyway)
    assert not list(tmp_path.rglob("*.gz")) and not list(tmp_path.rglob("*.partial"))


def test_metrics_logged_every_n_steps(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged)
    run_steps(engine, 11)
    assert [s for s, _ in logged] == [5, 10]
    step, metrics = logged[0]
    assert {"perf/train/step_time_ms", "perf/train/data_wait_fraction", "perf/train/samples_per_sec",
            "perf/memory/host_rss_mb", "perf/overhead/window_ms", "perf/overhead/log_ms"} <= set(metrics)
    assert metrics["perf/memory/host_rss_mb"] > 1


@pytest.mark.parametrize("fetch", [True, False], ids=["fetch-timed", "no-loader-timing"])
def test_a_step_count_that_did_not_move_never_reuses_a_step_number(tmp_path: Path, fetch: bool) -> None:
    """The adapter's count stays at 3 after step 3 completed (a skipped optimizer step): the next step is 4, whether
    the fetch began it already (as step 4, the one expected) or the batch begins it."""
    engine = make_engine(tmp_path)  # warm-up at 3, window 4-5
    begun = []
    for count in (0, 1, 2, 3, 3, 4):
        if fetch:
            engine.data_start()
            engine.data_end()
        engine.batch_start(count)
        begun.append(engine.step)
        engine.batch_end(stepped=True, samples=8)
    engine.close()
    assert begun == [0, 1, 2, 3, 4, 5]
    (path,) = engine.exported
    assert path.parent.name == "window-000004-000005" and trace_steps(path) == [4, 5]


def test_nvtx_stays_balanced(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    engine.batch_start(0)
    engine.phase("backward")
    assert engine.nvtx.depth in (0, 2)  # 0 when the nvtx package has no tool attached
    engine.close()
    assert engine.nvtx.depth == 0


def test_a_run_that_never_reaches_a_window_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 10})
    run_steps(engine, 3)
    engine.close()
    err = capsys.readouterr().err
    assert "perf-callbacks: no profiling window was recorded: 3 optimizer steps ran" in err
    assert "first window starts at step 12 (schedule: skip_first=10, wait=1, warmup=1)" in err
    engine = make_engine(tmp_path / "none", schedule={"skip_first": 10})
    engine.close()  # no step ran (e.g. a learning-rate search that ran its own loop): nothing to advise
    assert "perf-callbacks" not in capsys.readouterr().err


def test_a_closed_engine_starts_no_profiler(tmp_path: Path) -> None:
    """A hook that still reaches a closed engine (a wrapper left by a failed fit) must not start a window."""
    engine = make_engine(tmp_path)
    run_steps(engine, 2)
    engine.close()
    run_steps(engine, 3, start=2)  # steps 2-4: warm-up at 3, window 4-5
    assert not torch.autograd.profiler._is_profiler_enabled  # would be recording step 4 and left running
    assert engine.windows.session is None


def test_our_logging_inside_a_window_is_set_aside_in_the_trace_figures(tmp_path: Path) -> None:
    """A metrics logger that takes 30 ms (Accelerate's cross-rank gather, a slow tracker) at a logging step inside a
    window: the trace marks it as ours and the window's step time does not include it."""
    import time

    from perf_callbacks.analysis import analyze

    def slow_log(metrics: dict, step: int) -> None:
        time.sleep(0.03)

    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 2, "wait": 1, "warmup": 1, "active": 4}, "summary": False})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=1, log_metrics=slow_log))
    run_steps(engine, 9)  # window 4-7, a logging step at every step
    engine.close()
    (path,) = engine.exported
    spans = [e for e in trace_events(path) if e.get("name") == "perf_callbacks.overhead"]
    assert len(spans) >= 3 and all(e["dur"] >= 25_000 for e in spans)
    result = analyze(path)
    assert result.step_time_ms is not None and result.step_time_ms < 20, result.step_time_ms  # not 30+ ms



@pytest.mark.parametrize("disturbance", ["validation", "checkpoint", "window", None])
def test_intervals_with_validation_checkpoints_or_windows_never_feed_the_slowdown_check(
        tmp_path: Path, disturbance: str | None) -> None:
    """Fed step times: 100 ms for 8 intervals of 5 steps (the baseline), then 200 ms in every later interval, each of
    which also holds a validation, a checkpoint save or a profiling window: no slowdown is said. Without them (None),
    the same 200 ms steps are a slowdown."""
    schedule = {"skip_first": 45, "wait": 2, "warmup": 1, "active": 2, "repeat": 0} if disturbance == "window" \
        else {"skip_first": 1000}
    engine = make_engine(tmp_path, [], schedule=schedule, data_wait_steps=1000, degradation_threshold=0.2)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for step in range(100):
            fake_steps(engine, clock, 1, wait=0.0, work=0.1 if step < 40 else 0.2, start=step)
            if step >= 40 and step % 5 == 2 and disturbance in ("validation", "checkpoint"):
                getattr(engine, f"{disturbance}_start")()
                clock.t += 1.0
                getattr(engine, f"{disturbance}_end")()
    engine.close()
    slow = [str(w.message) for w in seen if issubclass(w.category, PerformanceDegradationWarning)]
    assert len(slow) == (1 if disturbance is None else 0), slow


def test_a_steps_samples_and_micro_batches_add_up_over_its_micro_batches(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 1000}, data_wait_steps=1000)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        for step in range(6):
            for micro in range(3):  # 3 micro-batches of 8 samples, 40 ms each (no loader timing)
                engine.batch_start(step)
                clock.t += 0.04
                engine.batch_end(stepped=micro == 2, samples=8)
            assert engine.monitor.stats.unit_times[-1:] in ([], [pytest.approx(0.12 / 24)])
        for micro in range(4):  # a step of 4 micro-batches of unknown size: timed per micro-batch
            engine.batch_start(6)
            clock.t += 0.04
            engine.batch_end(stepped=micro == 3)
        engine.batch_start(7)
    assert logged[0][1]["perf/train/samples_per_sec"] == pytest.approx(24 / 0.12)
    assert engine.monitor.stats.unit_times[-1] == pytest.approx(0.16 / 4)
    unknown: list = []
    engine = make_engine(tmp_path / "unknown", unknown, schedule={"skip_first": 1000}, data_wait_steps=1000)
    for step in range(6):
        for micro in range(2):
            engine.batch_start(step)
            engine.batch_end(stepped=micro == 1)
    assert "perf/train/step_time_ms" in unknown[0][1] and "perf/train/samples_per_sec" not in unknown[0][1]


def test_a_window_holds_our_phase_spans_by_name(tmp_path: Path) -> None:
    """The analysis reads them: data_wait is the data wait, validation and checkpoint are set aside."""
    engine = make_engine(tmp_path, schedule={"skip_first": 1, "wait": 0, "warmup": 0, "active": 4})
    for step in range(3):  # steps 1 and 2 are recorded, with what follows them
        run_steps(engine, 1, start=step)
        engine.validation_start()
        engine.checkpoint_start()  # e.g. a checkpoint saved by a validation callback
        engine.checkpoint_end()
        engine.validation_end()
        engine.checkpoint_start()
        engine.checkpoint_end()
    engine.checkpoint_start()  # still open when training ends: closed with the window
    engine.close()
    (path,) = engine.exported
    names = [e["name"] for e in trace_events(path) if e.get("name", "").lower().startswith(("perf_callbacks.", "xx"))]
    assert set(names) == {"perf_callbacks.data_wait", "perf_callbacks.forward", "perf_callbacks.framework",
                          "perf_callbacks.validation", "perf_callbacks.checkpoint"}
    assert names.count("perf_callbacks.checkpoint") == 5 and names.count("perf_callbacks.validation") == 2


def test_a_checkpoint_inside_validation_is_set_aside_once(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 1000}, data_wait_steps=1000)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        for step in range(6):
            fake_steps(engine, clock, 1, wait=0.01, work=0.09, start=step)
            engine.validation_start()
            clock.t += 0.5
            engine.checkpoint_start()  # saved by a validation callback: already validation time
            clock.t += 0.3
            engine.checkpoint_end()
            engine.validation_end()
    assert logged[0][1]["perf/train/step_time_ms"] == pytest.approx(100.0)


def test_a_run_shorter_than_one_interval_logs_it_once_at_a_clean_close(tmp_path: Path) -> None:
    """3 steps of a 5-step interval: logged once at close, at step 3. The last step is measured to its optimizer step
    (50 ms: no next fetch), not to the close 10 s later; the others run to the next fetch (100 ms)."""
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 1000}, data_wait_steps=1000, flops=False)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        fake_steps(engine, clock, 3, wait=0.01, work=0.04, framework=0.05)
        clock.t += 10.0  # the framework's teardown
        engine.close()
        engine.close()
    assert [s for s, _ in logged] == [3]
    metrics = logged[0][1]
    assert metrics["perf/train/step_time_ms"] == pytest.approx(100.0)  # the median of 100, 100 and 50 ms
    assert metrics["perf/train/samples_per_sec"] == pytest.approx(30 / 0.25)
    assert metrics["perf/train/data_wait_fraction"] == pytest.approx(0.03 / 0.25)


def test_a_run_that_logged_an_interval_or_failed_logs_nothing_at_close(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 1000}, flops=False)
    assert engine.log_short_run() is False  # no step ran yet: nothing to log (the Accelerate adapter reads this)
    run_steps(engine, 7)  # logged at 5; steps 5-6 are the tail of an interval, not a short run
    assert engine.log_short_run() is False
    engine.close()
    assert [s for s, _ in logged] == [5]
    logged.clear()
    engine = make_engine(tmp_path / "failed", logged, schedule={"skip_first": 1000}, flops=False)
    run_steps(engine, 3)
    engine.close(ValueError("user error"))
    assert logged == []


class FakeNvtxDomain:
    """Records the ranges the engine opens and closes, as an attached NVTX tool (Nsight Systems) would see them."""

    def __init__(self) -> None:
        self.ranges: list[str] = []

    def get_event_attributes(self, message: str, color: str, category: str, payload: int | None = None) -> str:
        return message if payload is None else f"{message}#{payload}"

    def push_range(self, attrs: str) -> None:
        self.ranges.append(attrs)

    def pop_range(self) -> None:
        self.ranges.append("pop")


def test_nvtx_ranges_nest_steps_phases_and_checkpoints(tmp_path: Path) -> None:
    """With a tool attached: each step's range holds its phases, is closed when the next step begins, and a
    checkpoint nests in the open phase; a short run's interval logged before close leaves the last step's range to
    close. The fast tests otherwise run with no tool, where every NVTX call is skipped."""
    engine = make_engine(tmp_path, schedule={"skip_first": 1000})
    engine.nvtx._domain = domain = FakeNvtxDomain()
    engine.phases.nvtx_on = True
    run_steps(engine, 2)
    engine.validation_start()
    engine.checkpoint_start()
    engine.checkpoint_end()
    engine.validation_end()
    engine.checkpoint_start()
    engine.checkpoint_end()
    assert engine.log_short_run()  # as the Accelerate adapter does before its close-time flush
    engine.close()
    fetch = ["data_wait", "pop", "framework", "pop"]  # step 0's number is not known before its batch starts
    batch = ["forward", "pop", "framework"]
    assert domain.ranges == ([*fetch, "step#0", *batch, "pop", "pop", "step#1", *fetch, *batch]
                             + ["pop", "validation", "checkpoint", "pop", "pop", "framework", "checkpoint", "pop"]
                             + ["pop", "pop"])  # close: the framework phase, then step 1
    assert engine.nvtx.depth == 0


def test_a_short_runs_logging_at_close_is_log_overhead(tmp_path: Path) -> None:
    """The interval a short run logs at close goes through a 2 s (fed) metrics logger: counted as logging overhead."""
    engine = make_engine(tmp_path, schedule={"skip_first": 1000}, flops=False)
    clock = FakeClock()

    def slow_logger(metrics: dict, step: int) -> None:
        clock.t += 2.0

    engine.ctx.log_metrics = slow_logger
    with mock.patch("time.perf_counter", clock):
        fake_steps(engine, clock, 3, wait=0.01, work=0.09)
        engine.close()
    assert engine.monitor.overhead == {"window": 0.0, "log": pytest.approx(2.0)}


def test_a_plain_fork_does_not_close_the_parents_engine_at_its_exit(tmp_path: Path) -> None:
    """A child made with os.fork() that exits normally runs the atexit handlers it inherited: the engine's must not
    close the parent's copy there (it would print the parent's lines and wait for jobs whose thread is not there)."""
    script = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})
from pathlib import Path
from tests.core.engine_helpers import make_engine, run_steps
engine = make_engine(Path({str(tmp_path)!r}), schedule={{"skip_first": 100}})
run_steps(engine, 2)
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: atexit handlers run in the child
os.waitpid(pid, 0)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("no profiling window was recorded") == 1, done.stderr  # the parent's close, once

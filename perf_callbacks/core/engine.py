"""The engine: one training run on one rank, driven by a few calls per micro-batch.

An adapter (Lightning, Accelerate, transformers) maps its framework's hooks onto::

    data_start() / data_end()  # right around the DataLoader's next(): data wait is the time in between, nothing else
    batch_start(step)          # a micro-batch of optimizer step `step` (= optimizer steps completed so far) starts
    phase("backward") ...      # optional phase ranges: forward, backward, optimizer_step
    batch_end(stepped)         # stepped: this micro-batch completed an optimizer step
    close(exc)                 # end of training, or an exception (then the partial trace is flushed)

A step begins at its first activity (the fetch of its first micro-batch, or the batch itself) and lasts until the next
step begins, so its NVTX range and ``ProfilerStep#N`` span hold its data wait, its work and the framework's work
after it (the ``framework`` phase), and no step is opened before it runs. Time set aside (validation, checkpoint
saves, perf-callbacks' own export and logging) is left out of step time and data wait. Outside profiling windows a
micro-batch costs a few ``perf_counter`` reads, integer compares and (with a tool attached) NVTX push/pops; memory
is read only at logging steps and nothing synchronises with the device.
"""

from __future__ import annotations

import atexit
import functools
import logging
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.clock import StepClock
from perf_callbacks.core.context import MetricsFn, RunContext, TextFn
from perf_callbacks.core.dataloader import Finding, data_wait_finding
from perf_callbacks.core.memory import MemorySampler
from perf_callbacks.core.memory_watch import MemoryWatch
from perf_callbacks.core.nvtx import NvtxRanges
from perf_callbacks.core.stats import DataWaitCheck, DegradationDetector, StepStats
from perf_callbacks.core.traces import TraceLayout
from perf_callbacks.core.warn import warn_user
from perf_callbacks.core.window import WindowRecorder
from perf_callbacks.exceptions import (
    DataLoaderWarning,
    InstrumentUnavailableWarning,
    PerformanceDegradationWarning,
    PerfWarning,
    ShardingWarning,
)

__all__ = ["MetricsFn", "PerfEngine", "RunContext", "TextFn"]
log = logging.getLogger(__name__)
CLOSE_WAIT_S = 120.0


class PerfEngine:
    """Composes the step clock, profiler windows, NVTX ranges, memory sampling and step statistics.

    Args:
        config: the validated configuration.
        ctx: the run's context, filled in by the adapter.
    """

    def __init__(self, config: PerfConfig, ctx: RunContext) -> None:
        self.config, self.ctx = config, ctx
        self.is_main = ctx.rank == 0
        self._warned: set[str] = set()
        self.nvtx = NvtxRanges(config.nvtx_domain, enabled=config.nvtx)
        self._nvtx_on = self.nvtx.enabled  # no tool attached (the usual case): skip the calls on the hot path
        self.cuda = ctx.device is not None and ctx.device.type == "cuda"
        self.memory = MemorySampler(ctx.device, nvml=config.nvml) if config.memory else None
        self.windows = WindowRecorder(config, ctx, self.nvtx, self._warn)
        self.mem = MemoryWatch(config, ctx.rank, ctx.device, self.windows.layout.run_dir,
                               lambda msg: self._warn("memory_history", InstrumentUnavailableWarning, msg))
        self.windows.mem = self.mem
        self.clock = StepClock()
        self.stats = StepStats()
        self.degradation = DegradationDetector(config.degradation_threshold)
        self.data_wait_check = DataWaitCheck(config.data_wait_steps, config.data_wait_threshold)
        self.step: int | None = None  # the open step
        self.steps_run = 0  # optimizer steps completed in this run
        self._ended = True  # the open step completed: the next activity begins the next step
        self._recording = False  # the open step is recorded by the profiler
        self._expected: int | None = None  # the number of the next step, once known
        self._pending_t: float | None = None  # a fetch started before the next step's number was known
        self._phase: str | None = None
        self._phase_rf: Any = None
        self._ckpt_rf: Any = None
        self._t_aside = 0.0
        self._clean = True  # no window, validation or checkpoint in this logging interval
        self._overhead = {"window": 0.0, "log": 0.0}
        self._closed = False
        self._samples: int | None = None
        self._at_exit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._at_exit)

    @property
    def exported(self) -> list[Any]:
        """Trace files written so far (a window's file appears once its background job finished)."""
        return self.windows.exported

    @property
    def layout(self) -> TraceLayout:
        """Where this run's windows go."""
        return self.windows.layout

    def attach_model(self, model: torch.nn.Module) -> None:
        """The model that gets per-module NVTX ranges inside windows (``nvtx_modules``)."""
        self.windows.model = model

    # ---- hot path: once per micro-batch ---------------------------------------------------------------------
    def data_start(self) -> None:
        """The loop asks its DataLoader for the next batch (call right before ``next(iterator)``)."""
        t = time.perf_counter()
        if self._ended:
            if self._expected is None:
                self._pending_t = t if self._pending_t is None else self._pending_t
            else:
                self._begin(self._expected, t)
        self.clock.data_start(t)
        self.phase("data_wait")

    def data_end(self) -> None:
        """The DataLoader handed over the batch (call right after ``next(iterator)`` returned or raised)."""
        self.clock.data_end(time.perf_counter())
        self.phase("framework")

    def batch_start(self, step: int, phase: str | None = "forward") -> None:
        """A micro-batch of optimizer step ``step`` starts, in ``phase`` (None: no phase range until the next)."""
        if self._ended or step != self.step:
            t = time.perf_counter()
            if self._ended and self.step is not None and step <= self.step:
                step = self.step + 1  # the adapter's count did not move (e.g. a skipped step): never reuse a number
            self._begin(step, t)
        if phase is not None:
            self.phase(phase)

    def batch_end(self, stepped: bool, samples: int | None = None) -> None:
        """A micro-batch ended; ``stepped`` is True when it completed an optimizer step."""
        self.end_phase()
        if stepped and self.step is not None and not self._ended:
            self._ended, self._expected = True, self.step + 1
            self.steps_run += 1
            self._samples = samples
            if self.config.nsys_steps is not None and self.step == self.config.nsys_steps[1]:
                self.windows.nsys.stop(self.step)
            if (self.step + 1) % self.ctx.log_every_n_steps == 0:  # the steps measured so far (this one is not yet)
                with self._tool("log"):
                    self._guard("metrics", self._log_interval, self.step + 1)
            if self._recording:
                with self._tool("window"):
                    self.windows.loader_timed = self.clock.loader_timed
                    if self.windows.step_completed():
                        self._recording, self._clean = False, False
        self.phase("framework")

    def phase(self, name: str) -> None:
        """End the current phase range and open ``name`` (NVTX always; a trace span inside windows)."""
        if self._phase is not None:
            self.end_phase()
        self._phase = name
        if self.mem.armed:
            self.mem.phase(name, self.step)
        if self._nvtx_on:
            self.nvtx.push(name)
        if self._recording:
            self._phase_rf = _enter_span(f"perf_callbacks.{name}")

    def end_phase(self) -> None:
        """Close the current phase range, if any."""
        if self._phase is None:
            return
        self._phase = None
        if self._nvtx_on:
            self.nvtx.pop()
        if self._phase_rf is not None:
            rf, self._phase_rf = self._phase_rf, None
            _exit_span(rf)

    # ---- time set aside: validation and checkpoints ---------------------------------------------------------
    def validation_start(self) -> None:
        """Validation inside training: its own range, and its time is left out of step time and data wait."""
        self._t_aside = time.perf_counter()
        self._clean = False
        self.phase("validation")

    def validation_end(self) -> None:
        """Validation finished."""
        self.clock.set_aside(time.perf_counter() - self._t_aside)
        self.phase("framework")

    def checkpoint_start(self) -> None:
        """A checkpoint save begins: a range nested in the current phase; its time is left out of step and wait."""
        self._t_ckpt = time.perf_counter()
        self._clean = False
        if self._nvtx_on:
            self.nvtx.push("checkpoint")
        if self._recording:
            self._ckpt_rf = _enter_span("perf_callbacks.checkpoint")

    def checkpoint_end(self) -> None:
        """The checkpoint save finished (or raised)."""
        if self._ckpt_rf is not None:
            rf, self._ckpt_rf = self._ckpt_rf, None
            _exit_span(rf)
        if self._nvtx_on:
            self.nvtx.pop()
        if self._phase != "validation":  # else already left out as validation time
            self.clock.set_aside(time.perf_counter() - self._t_ckpt)

    @contextmanager
    def tool_time(self, kind: str = "log") -> Iterator[None]:
        """perf-callbacks' own work (an adapter's metric flush): left out of step time, reported as overhead."""
        with self._tool(kind):
            yield

    # ---- once per optimizer step -------------------------------------------------------------------------------
    def _begin(self, step: int, t: float) -> None:
        carry = self._pending_t is not None
        if self._pending_t is not None:
            t, self._pending_t = self._pending_t, None
        self.end_phase()
        if self.step is not None:
            self._end_step(t)
        self.step, self._ended, self._expected = step, False, step
        self.clock.begin(t, carry_wait=carry)
        if self.mem.history_at is not None:
            self.mem.step_begins(step)
        if self._nvtx_on:
            self.nvtx.push_step(step)
        nsys_steps = self.config.nsys_steps
        if nsys_steps is not None and step == nsys_steps[0]:
            self.windows.nsys.start(step)
        if self.windows.busy:
            self.windows.poll()
        self._recording = self.windows.begin_step(step)

    def _end_step(self, t: float) -> None:
        step = self.step
        if self._nvtx_on:
            self.nvtx.pop()
        if not self._ended or step is None:  # abandoned: no optimizer step completed (a `break`, a resumed count)
            return
        if self.windows.action.value:  # a profiled step: its times are not comparable
            self._clean = False
        else:
            self._measure(step, t)

    def _measure(self, step: int, t: float) -> None:
        step_time, wait = self.clock.elapsed(t), self.clock.wait
        self.stats.update(step_time, wait, self._samples)
        if self.clock.loader_timed:
            share = self.data_wait_check.update(step, step_time, wait)
            if share is not None:
                self._warn_data_wait(share, step)

    # ---- logging and checks ------------------------------------------------------------------------------------
    def _log_interval(self, step: int) -> None:
        metrics = self.stats.compute()
        self.stats.reset()
        if not self.clock.loader_timed:
            metrics.pop("train/data_wait_fraction", None)
        if self.memory is not None:
            metrics.update(self.memory.sample())
            self.mem.log(metrics, step)
        for kind, seconds in self._overhead.items():
            metrics[f"overhead/{kind}_ms"] = seconds * 1e3
        self._overhead = dict.fromkeys(self._overhead, 0.0)
        median = metrics.get("train/step_time_ms")
        if median is not None and self._clean:
            slow = self.degradation.check(median, step)
            if slow is not None:
                n = self.ctx.log_every_n_steps
                self._warn("degradation", PerformanceDegradationWarning, (
                    f"median step time has been {slow.ratio - 1:.0%} above this run's baseline for {slow.intervals} "
                    f"logging intervals (steps {slow.since_step - n}-{slow.until_step}): {slow.median:.2f} ms against "
                    f"{slow.baseline:.2f} ms over steps {slow.baseline_steps[0] - n}-{slow.baseline_steps[1]}, "
                    f"beyond the baseline's own spread ({self.degradation.noise:.0%}); intervals with profiling "
                    "windows, validation or checkpoints are left out. Look for memory fragmentation (reserved >> "
                    "allocated), a growing Python-side cache, other jobs on the machine, or thermal throttling"))
        self._clean = True
        if self.ctx.log_metrics is not None and metrics:
            self.ctx.log_metrics({f"perf/{k}": v for k, v in metrics.items()}, step)

    def _warn_data_wait(self, share: float, step: int) -> None:
        name, workers = self.ctx.data_loader
        first = self.data_wait_check.first_step or 0
        self._warn("data_wait", DataLoaderWarning, data_wait_finding(name, share, first, step, workers).message)

    def report_findings(self, findings: list[Finding]) -> None:
        """Warn once (rank 0) for each DataLoader finding.

        ``num_workers=0`` alone is no problem (an in-memory dataset loads fastest in-process): it is said only with the
        measured data-wait share, by the data-wait check, so the advice is always backed by a measurement.
        """
        for f in findings:
            if f.code == "num_workers":
                continue
            category = ShardingWarning if f.code in ("not_sharded", "double_sharded") else DataLoaderWarning
            self._warn(f"{f.code}:{f.loader}", category, f.message)

    def _warn(self, key: str, category: type[PerfWarning], message: str, main_only: bool = True) -> None:
        if key in self._warned or (main_only and not self.is_main):
            return
        self._warned.add(key)
        warn_user(message, category)

    @contextmanager
    def _tool(self, kind: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - t0
            self.clock.set_aside(spent)
            self._overhead[kind] = self._overhead.get(kind, 0.0) + spent

    def _guard(self, instrument: str, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - instrumentation must never break training
            if instrument == "metrics":
                self.memory = None
            rank = f" on rank {self.ctx.rank}" if self.ctx.world_size > 1 else ""
            self._warn(f"disabled:{instrument}", InstrumentUnavailableWarning,
                       f"{instrument} disabled{rank}: {type(err).__name__}: {err}; training continues", False)

    # ---- end of training ---------------------------------------------------------------------------------------
    def note_failure(self, exc: BaseException, phase: str | None = None) -> None:
        """An exception leaves ``phase`` (default: the open one) before :meth:`close` runs: remember where it was."""
        self.mem.note_failure(exc, self.step, phase or self._phase)

    def close(self, exc: BaseException | None = None, batch: Any = None) -> None:
        """Stop everything and flush: the partial trace of an interrupted window is exported. Never raises.

        On ``torch.OutOfMemoryError`` the rank's ``oom-rank{R}/`` evidence is written first (``batch``: the failing
        batch if the adapter knows it, else the innermost ``batch`` local of the traceback).
        """
        if self._closed:
            return
        self._closed = True
        if exc is not None:
            self.mem.on_exception(exc, self.step, self._phase, batch)
        atexit.unregister(self._at_exit)
        _quiet(self.end_phase)
        if self._ckpt_rf is not None:
            _quiet(lambda: _exit_span(self._ckpt_rf))
        self.windows.loader_timed = self.clock.loader_timed
        _quiet(lambda: self.windows.finish(exc))
        _quiet(self.windows.nsys.close)
        _quiet(self.nvtx.pop_all)
        _quiet(lambda: self.windows.wait(CLOSE_WAIT_S))
        _quiet(self.mem.oom.stop_history)
        self._recording = False
        if exc is None and self.is_main:
            _quiet(self._say_if_nothing_recorded)

    def _say_if_nothing_recorded(self) -> None:
        if self.windows.exported or self.windows.jobs or not self.windows.enabled or self.windows.stood_aside:
            return
        s = self.config.schedule
        first = s.skip_first + s.wait + s.warmup
        print(f"perf-callbacks: no profiling window was recorded: {self.steps_run} optimizer steps ran, and the "
              f"first window starts at step {first} (schedule: skip_first={s.skip_first}, wait={s.wait}, "
              f"warmup={s.warmup}). Lower schedule.skip_first to profile a shorter run.", file=sys.stderr, flush=True)


def _close_at_exit(ref: weakref.ReferenceType[PerfEngine]) -> None:
    """An engine its owner never closed: stop the profiler and flush the window before the interpreter goes away."""
    engine = ref()
    if engine is not None:
        engine.close()


# Phase spans inside windows: torch's fast record function costs about 0.2-0.8 us an enter/exit pair against 6-8 us
# for ``record_function``. Its events come out as ``cpu_op``; the analysis reads ``perf_callbacks.*`` ones as
# annotations. It asserts when exited with a profiler running that was not running when it was entered (another
# profiler, or a second instance, started in between), so it is entered only while a profiler runs, and exited only
# if one still does; ``ProfilerStep#N`` keeps ``record_function``: other tools expect it as a user annotation.
_FastRecordFunction: Any = getattr(torch._C._profiler, "_RecordFunctionFast", None)


def _profiling() -> bool:
    return bool(torch.autograd.profiler._is_profiler_enabled)


def _enter_span(name: str) -> Any:
    if _FastRecordFunction is None:
        rf = torch.profiler.record_function(name)
    elif _profiling():
        rf = _FastRecordFunction(name)
    else:
        return None
    rf.__enter__()
    return rf


def _exit_span(rf: Any) -> None:
    if _FastRecordFunction is not None and isinstance(rf, _FastRecordFunction) and not _profiling():
        return  # nothing to close: the profiler that saw it enter is gone
    rf.__exit__(None, None, None)


def _quiet(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001
        log.debug("ignored error during close", exc_info=True)

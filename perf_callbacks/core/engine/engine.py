"""The engine: one training run on one rank.

An adapter maps its framework's hooks onto::

    data_start() / data_end()  # right around the DataLoader's next(): data wait is the time in between, nothing else
    batch_start(step)          # a micro-batch of optimizer step `step` (= optimizer steps completed so far) starts
    phase("backward") ...      # optional phase ranges: forward, backward, optimizer_step
    batch_end(stepped, n)      # stepped: this micro-batch completed an optimizer step; n: its samples, if known
    close(exc)                 # end of training, or an exception (then the partial trace is flushed)

A step begins at its first activity (the fetch of its first micro-batch, or the batch) and lasts until the next one
begins: its NVTX range and ``ProfilerStep#N`` span hold its data wait, its work and the framework's work after it
(the ``framework`` phase); no step is opened before it runs. Validation, checkpoint saves and our own export and
logging are left out of step time and data wait (``core/clock.py``, ``core/engine/aside.py``); the files written
and where they are now: ``core/engine/run_files.py``. Outside windows a micro-batch costs a few
``perf_counter`` reads and compares; memory is read at logging steps only; nothing syncs with the device.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import os
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.clock import StepClock
from perf_callbacks.core.context import MetricsFn, RunContext, TextFn
from perf_callbacks.core.engine.aside import SetAside
from perf_callbacks.core.engine.captures import EngineCaptures
from perf_callbacks.core.engine.run_files import RunFiles
from perf_callbacks.core.exit import ExitCause
from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.core.files.traces import TraceLayout
from perf_callbacks.core.flops.compile_watch import CompileWatch
from perf_callbacks.core.flops.step import StepFlops
from perf_callbacks.core.hang.watchdog import watch_engine
from perf_callbacks.core.memory.growth import MemoryGrowth
from perf_callbacks.core.memory.parts import Owners, WindowParts, device_capacity
from perf_callbacks.core.memory.sampler import MemorySampler
from perf_callbacks.core.memory.watch import MemoryWatch
from perf_callbacks.core.ranges.nvtx import NvtxRanges
from perf_callbacks.core.spans import enter_span, exit_span
from perf_callbacks.core.timing.dataloader import Finding
from perf_callbacks.core.timing.monitor import StepMonitor
from perf_callbacks.core.triggers.schedule import Action
from perf_callbacks.core.warn import WarnOnce, quiet
from perf_callbacks.core.windows.recorder import WindowRecorder
from perf_callbacks.exceptions import InstrumentUnavailableWarning, MemoryGrowthWarning

__all__ = ["MetricsFn", "PerfEngine", "RunContext", "TextFn"]
log = logging.getLogger(__name__)
CLOSE_WAIT_S = 120.0
T = TypeVar("T")


class PerfEngine(SetAside, RunFiles):
    """Composes the step clock, profiler windows, NVTX ranges, memory sampling and step statistics.

    Args:
        config: the validated configuration.
        ctx: the run's context, filled in by the adapter.
    """

    def __init__(self, config: PerfConfig, ctx: RunContext) -> None:
        self.config, self.ctx = config, ctx
        self.is_main = ctx.rank == 0
        self._warn = WarnOnce(self.is_main)
        self.nvtx = NvtxRanges(config.nvtx_domain, enabled=config.nvtx)
        self._nvtx_on = self.nvtx.enabled  # no tool attached (the usual case): skip the calls on the hot path
        self.cuda = ctx.device is not None and ctx.device.type == "cuda"
        self.memory = MemorySampler(ctx.device, nvml=config.nvml) if config.memory else None
        # the pieces the parts share, made first and handed to each
        # every file written and metric logged (shared with the adapters): a failure never reaches training
        self.outputs = Outputs(self._warn, ctx.rank, ctx.world_size)
        self.clock = StepClock()
        layout = TraceLayout(ctx.output_dir, ctx.run_name)
        self.mem = MemoryWatch(config, ctx.rank, ctx.device, layout.run_dir,
                               lambda msg: self._warn("memory_history", InstrumentUnavailableWarning, msg),
                               self.outputs)
        self.growth = MemoryGrowth(ctx.device, lambda msg: self._warn("memory_growth", MemoryGrowthWarning, msg)) \
            if config.memory else None  # the memory held at the start of logged steps, and its trend
        self._held_at = ctx.log_every_n_steps - 1 if config.memory else sys.maxsize  # the next step read there
        self.compile = watch = CompileWatch(self._warn, self._compiled)  # torch.compile, once torch._dynamo is loaded
        # FLOPs per step (counted on one step if need be) and the peak; compiled kernels' FLOPs are not counted
        self.flops = StepFlops(config, ctx, self._warn, compiling=lambda: watch.active)
        self._flops_on = self.flops.wants_hooks  # until the FLOPs are known: then no cost on the hot path
        self.monitor = StepMonitor(config, ctx, self._warn, self.outputs, rates=self._interval_rates)
        self.windows = WindowRecorder(config, ctx, self.nvtx, self._warn, outputs=self.outputs, clock=self.clock,
                                      layout=layout, mem=self.mem, trace_meta=self.flops.meta,
                                      module_flops=self.flops.module_flops,
                                      growth_meta=self.growth.meta if self.growth is not None else None)
        self.step: int | None = None  # the open step
        self.steps_run = 0  # optimizer steps completed in this run
        self._ended = True  # the open step completed: the next activity begins the next step
        self._recording = False  # the open step is recorded by the profiler
        self._expected: int | None = None  # the number of the next step, once known
        self._done: int | None = None  # the last step that completed its optimizer step
        self._pending_t: float | None = None  # a fetch started before the next step's number was known
        self._phase: str | None = None
        self._phase_rf: Any = None  # the open phase's trace span (and the checkpoint's, below)
        self._plain = False  # a phase is only a name: no NVTX tool, no window, no armed memory step (see _replain)
        self._ckpt_rf: Any = None
        self._t_aside, self._closed, self._clean = 0.0, False, True  # _clean: no window/validation/ckpt this interval
        self._samples = self._micro = 0  # samples and micro-batches of the open step that ended (0 micro: never ran)
        self._last_elapsed, self._logged = 0.0, False  # _logged: some logging interval was logged
        self._log_every, self._nsys_steps = ctx.log_every_n_steps, config.nsys_steps  # read once per step
        self.exit_cause = ExitCause()  # at interpreter exit: the exception that ends the process, if known
        self.captures = EngineCaptures(config, ctx, self.windows, self.outputs, self._warn)  # core/capture*.py
        self._spike_limit = math.inf  # a measured step above it: an anomaly (refreshed at logging steps)
        self._at_exit = functools.partial(_close_at_exit, weakref.ref(self), os.getpid())
        atexit.register(self._at_exit)
        self.hang = watch_engine(self, config.hang_timeout, ctx.rank, ctx.world_size, self.windows.layout.run_dir)

    def _now(self) -> float:
        """``time.perf_counter`` for the time set aside (``core/engine/aside.py``), read where the hot path reads it."""
        return time.perf_counter()

    def attach_model(self, model: torch.nn.Module) -> None:
        """The model that gets per-module NVTX ranges inside windows (``nvtx_modules``)."""
        self.windows.model = self.flops.model = model

    def attach_owners(self, owners: Owners) -> None:
        """Where the run's models and optimizers are: their bytes by part go into each window and the OOM summary."""
        device = self.ctx.device
        self.windows.parts = WindowParts(owners, device.type if device is not None else "cpu", device_capacity(device))
        self.mem.oom.owners = owners

    @property
    def run_dir(self) -> Path:
        """The run's folder: its windows, TensorBoard events and forensics (local; see :meth:`locate`)."""
        return self.windows.layout.run_dir

    def mark_compiled(self, compiled: bool) -> None:
        """The adapter found (or set up) a compiled model it does not attach: its FLOPs are never counted."""
        self.flops.compiled = compiled

    def record_no_windows(self) -> None:
        """Record no profiler window (another profiler records its own trace): NVTX, metrics and checks go on."""
        self.windows.enabled = False

    def write_file(self, writer: str, fn: Callable[[], T], path: str | os.PathLike[str] | None = None) -> T | None:
        """``fn()`` as the run's ``writer`` (e.g. ``"state"``): a failure turns that writer off, never training."""
        return self.outputs.call(writer, fn, path)

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
        if self._plain:  # phase("data_wait") without the call
            self._phase = "data_wait"
        else:
            self.phase("data_wait")

    def data_end(self) -> None:
        """The DataLoader handed over the batch (call right after ``next(iterator)`` returned or raised)."""
        self.clock.data_end(time.perf_counter())
        if self._plain:
            self._phase = "framework"
        else:
            self.phase("framework")

    def batch_start(self, step: int, phase: str | None = "forward") -> None:
        """A micro-batch of optimizer step ``step`` starts, in ``phase`` (None: no phase range until the next)."""
        if self._done is not None and step <= self._done:  # the adapter's count did not move (e.g. a skipped step),
            step = self._done + 1  # whether the fetch already began the next step or not: never reuse a number
        if self._ended or step != self.step:
            self._begin(step, time.perf_counter())
        if self._flops_on:  # the FLOP-counting step starts at its first micro-batch (see core/flops/step.py)
            self._flops_on = self.flops.batch_start(self.step or 0, self._micro, self.windows.action.value != 0)
        if phase is not None:
            if self._plain:
                self._phase = phase
            else:
                self.phase(phase)

    def batch_end(self, stepped: bool, samples: int | None = None) -> None:
        """A micro-batch of ``samples`` samples ended; ``stepped`` is True when it completed an optimizer step."""
        if self._phase is not None:  # end_phase(), called only when a range or span is open
            if self._plain:
                self._phase = None
            else:
                self.end_phase()
        self._micro += 1
        if samples:
            self._samples += samples
        if self._flops_on:
            self._flops_on = self.flops.batch_end(stepped, self._micro)
        step = self.step
        if stepped and step is not None and not self._ended:
            self._last_elapsed = self.clock.elapsed(time.perf_counter())  # the last step's time, if no step follows
            self._ended, self._expected, self._done = True, step + 1, step
            self.steps_run += 1
            if self._nsys_steps is not None and step == self._nsys_steps[1]:
                self.windows.nsys.stop(step)
            if (step + 1) % self._log_every == 0:  # the steps measured so far (this one is not yet)
                self._logging_step(step + 1)
            if self._recording:
                with self.tool_time("window"):
                    if self.windows.step_completed():
                        self._recording, self._clean = False, False
                self._replain()
        if self._plain:
            self._phase = "framework"
        else:
            self.phase("framework")

    def phase(self, name: str) -> None:
        """End the current phase range and open ``name`` (NVTX always; a trace span inside windows)."""
        if self._plain:  # the usual case outside windows: nothing to close or open
            self._phase = name
            return
        if self._phase is not None:
            self.end_phase()
        self._phase = name
        if self.mem.armed:
            self.mem.phase(name, self.step)
            self._replain()  # the armed step's last phase disarms it
        if self._nvtx_on:
            self.nvtx.push(name)
        if self._recording:
            self._phase_rf = enter_span(f"perf_callbacks.{name}")
            if name == "optimizer_step" and (parts := self.windows.parts) is not None and not parts.grads_read:
                self.windows.note_gradients()  # inside windows only, once a window

    def end_phase(self) -> None:
        """Close the current phase range, if any."""
        if self._phase is None:
            return
        self._phase = None
        if self._plain:
            return
        if self._nvtx_on:
            self.nvtx.pop()
        if self._phase_rf is not None:
            rf, self._phase_rf = self._phase_rf, None
            exit_span(rf)

    # ---- once per optimizer step -------------------------------------------------------------------------------
    def _begin(self, step: int, t: float) -> None:
        pending = self._pending_t
        carry = pending is not None
        if pending is not None:
            t, self._pending_t = pending, None
        if self._phase is not None:
            if self._plain:
                self._phase = None
            else:
                self.end_phase()
        if self.step is not None:
            self._end_step(t)
        self.step, self._ended, self._expected, self._micro, self._samples = step, False, step, 0, 0
        self.clock.begin(t, carry)
        if not self.steps_run and not self.compile.installed:  # a model compiled after the engine was made
            self.compile.install()
        if self.mem.history_at is not None:
            self.mem.step_begins(step)
        if step >= self._held_at:  # a logged step: the memory held at its start (before a window's profiler starts)
            self._read_held(step)
        if self._nvtx_on:
            self.nvtx.push_step(step)
        nsys_steps = self._nsys_steps
        if nsys_steps is not None and step == nsys_steps[0]:
            self.windows.nsys.start(step)
        windows = self.windows
        if (windows.jobs or windows.uploads is not None) and windows.busy:  # the property only when it can be true
            windows.poll()
        # before the schedule's next window the action stays NONE (quiet_until, set by begin_step): no call
        self._recording = step >= windows.quiet_until and windows.begin_step(step)
        if self._recording or not self._plain:  # else no flag changed since the last _replain
            self._replain()

    def _replain(self) -> None:
        """Whether phases are only names until the flags change (at each step's begin, window end, logging step).

        ``_nvtx_on``, ``_recording``, an open phase span and the memory watch's ``armed`` are read here, so that a
        phase outside windows reads one flag.
        """
        self._plain = not (self._nvtx_on or self._recording or self._phase_rf is not None or self.mem.armed)

    def _end_step(self, t: float | None) -> None:
        """Measure the step that ended; ``t``: when the next began (None: at its optimizer step, no step follows)."""
        step = self.step
        if self._nvtx_on and t is not None:
            self.nvtx.pop()
        if self.compile.dirty:  # the step compiled: its recompilations and graph breaks; not a comparable interval
            self._clean = False
            self.compile.poll(step)
        if not self._ended or step is None:  # abandoned: no optimizer step completed (a `break`, a resumed count)
            return
        if step == self.flops.counted_step:  # its ops ran through the FLOP counter: its time is not its own
            self._clean = False
            self.monitor.set_aside()
        elif self.windows.action is not Action.NONE:  # a profiled step: its times are not comparable
            self._clean = False
        else:
            elapsed = self._last_elapsed if t is None else self.clock.elapsed(t)
            self.monitor.measured(step, elapsed, self.clock.wait, self._samples or None, self.clock.loader_timed,
                                  self._micro)
            if elapsed > self._spike_limit:
                self.captures.spiked(step, elapsed)

    def report_findings(self, findings: list[Finding]) -> None:
        """Warn once (rank 0) for each DataLoader finding (see :meth:`StepMonitor.findings`)."""
        self.monitor.findings(findings)

    def log_short_run(self) -> bool:
        """A run that ends before its first logging step logs its interval once, at its last step; True if it did.

        Its last step is measured up to its optimizer step (no next step begins). :meth:`close` calls it on a clean
        close, after the window's export; the Accelerate adapter calls it first, to send it with its close-time flush.
        """
        if self._logged or self._done is None:
            return False
        if self._ended and self.step == self._done:
            self._end_step(None)
        with self.tool_time("log"):
            self._log_interval(self._done + 1, clean=False)
        self._replain()
        return True

    def _interval_rates(self, metrics: dict[str, float]) -> None:
        self.flops.add_metrics(metrics)
        self.compile.add_metrics(metrics, self.step)

    def _logging_step(self, step: int) -> None:
        """Log the interval that ends at ``step``: ``tool_time("log")`` without a generator, on the hot path's way."""
        if self._recording:
            with self.tool_time("log"):
                self._log_interval(step)
        else:
            t0 = time.perf_counter()
            try:
                self._log_interval(step)
            finally:
                self._tool_spent("log", time.perf_counter() - t0)
        if self.mem.armed:  # the interval's logging armed the next memory-measured step
            self._plain = False

    def _read_held(self, step: int) -> None:
        """The memory held at the start of a logged step: our own work, set aside from the step (as logging is)."""
        self._held_at = sys.maxsize  # until the logging step sets the next
        t0 = time.perf_counter()
        try:
            if self.growth is not None:
                self.growth.read(step)
        except Exception as err:  # noqa: BLE001 - instrumentation must never break training
            self.growth = self.windows.growth_meta = None
            self._warn("memory_growth_off", InstrumentUnavailableWarning,
                       f"reading the memory held at step start failed ({err!r}): the memory growth check is off")
        finally:
            self._tool_spent("log", time.perf_counter() - t0)

    def _memory_metrics(self, metrics: dict[str, float], step: int) -> None:
        if self.mem.peaks is not None:
            self.mem.log(metrics, step)
        if self.growth is not None:
            self.growth.add_metrics(metrics)

    def _log_interval(self, step: int, clean: bool = True) -> None:
        self._logged = True
        if self.growth is not None:  # the next logging step's start
            self._held_at = step - 1 + self._log_every
        try:
            extra = functools.partial(self._memory_metrics, step=step)
            times = self.monitor.stats.step_times  # the interval's, before log_interval starts the next
            self.monitor.log_interval(step, self.memory, clean and self._clean, self.clock.loader_timed, extra)
            self._spike_limit = self.captures.interval(step, times, self.monitor.slowdown)
            self._clean = True
        except Exception as err:  # noqa: BLE001 - instrumentation must never break training
            self.memory = None
            self.outputs.failed("metrics", err)

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
        if self.hang is not None:  # first: our own close (the window's export and analysis) is no hang
            quiet(self.hang.stop)
        if exc is not None:
            self.mem.on_exception(exc, self.step, self._phase, batch)
        elif self._recording and not self._ended:  # training ended before the open step's optimizer step: a fetch
            self.windows.retract(self.step)  # that found no batch, an epoch that ended mid-accumulation, a `break`
        atexit.unregister(self._at_exit)
        for fn in (self.flops.close, self.compile.close, self.end_phase,
                   lambda: exit_span(self._ckpt_rf) if self._ckpt_rf is not None else None,
                   lambda: self.windows.finish(exc), self.windows.nsys.close, self.nvtx.pop_all,
                   lambda: self.windows.wait(CLOSE_WAIT_S), self.mem.oom.stop_history, self.captures.close):
            quiet(fn)
        self._recording = False
        self._replain()
        if exc is None:  # after the window's export: our logging is no span in its trace
            quiet(self.log_short_run)
        if exc is None and self.is_main and self.steps_run and self.windows.nothing_recorded():
            print(self.windows.nothing_recorded_line(self.steps_run), file=sys.stderr, flush=True)
        self.record_no_windows()  # a hook that still calls a closed engine (a stale wrapper) starts no profiler


def _close_at_exit(ref: weakref.ReferenceType[PerfEngine], pid: int) -> None:
    """An engine its owner never closed: stop the profiler and flush the window before the interpreter goes away.

    As its owner would close it: with the exception that ends the process, if known (see :class:`ExitCause`). Only in
    the process that built it: a child made with a plain ``os.fork()`` inherits the handler and a copy of the engine,
    but not its worker thread, and closing that copy would write the parent's files and wait for jobs that never end.
    """
    if os.getpid() == pid and (engine := ref()) is not None:
        engine.windows.at_exit = True
        engine.close(engine.exit_cause())


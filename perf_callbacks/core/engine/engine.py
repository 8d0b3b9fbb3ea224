"""The engine: one training run on one rank.

An adapter maps its framework's hooks onto::

    data_start() / data_end()  # right around the DataLoader's next(): data wait is the time in between, nothing else
    batch_start(step)          # a micro-batch of optimizer step `step` (= optimizer steps completed so far) starts
    phase("backward") ...      # optional phase ranges: forward, backward, optimizer_step
    batch_end(stepped, n)      # stepped: this micro-batch completed an optimizer step; n: its samples, if known
    close(exc)                 # end of training, or an exception (then the partial trace is flushed)

A step runs from its first activity (a fetch or a batch) to the next's: its NVTX range and ``ProfilerStep#N`` span
hold its data wait, its work and the framework's after it; validation, checkpoints and our own work are set aside
(``aside.py``). Outside windows a micro-batch costs a few clock reads, compares and a step record row (``step_log``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import MetricsFn, RunContext, TextFn
from perf_callbacks.core.engine.aside import SetAside
from perf_callbacks.core.engine.captures import EngineCaptures
from perf_callbacks.core.engine.closing import close_engine, so_far_of
from perf_callbacks.core.engine.intervals import IntervalLog, interval_rates
from perf_callbacks.core.engine.phases import PhaseRanges
from perf_callbacks.core.engine.run_files import RunFiles
from perf_callbacks.core.engine.step_log import COMPILED, WINDOW, StepLog
from perf_callbacks.core.engine.step_state import StepState
from perf_callbacks.core.exit import ExitCause, close_at_exit
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
from perf_callbacks.core.timing.monitor import StepMonitor
from perf_callbacks.core.triggers.schedule import Action
from perf_callbacks.core.views import Derived
from perf_callbacks.core.warn import WarnOnce
from perf_callbacks.core.windows.recorder import WindowRecorder
from perf_callbacks.exceptions import InstrumentUnavailableWarning, MemoryGrowthWarning

__all__ = ["MetricsFn", "PerfEngine", "RunContext", "TextFn"]
T = TypeVar("T")


def now() -> float:
    """The engine's clock, that every part reads: ``time.perf_counter`` as this module sees it (a test's fake clock)."""
    return time.perf_counter()


class PerfEngine:
    """Composes the step clock, profiler windows, NVTX ranges, memory sampling and step statistics.

    Args:
        config: the validated configuration.
        ctx: the run's context, filled in by the adapter.
    """

    def __init__(self, config: PerfConfig, ctx: RunContext) -> None:
        self.config, self.ctx, self.is_main = config, ctx, ctx.rank == 0
        self._warn = warn = WarnOnce(self.is_main)
        self.nvtx = NvtxRanges(config.nvtx_domain, enabled=config.nvtx)
        self.cuda = ctx.device is not None and ctx.device.type == "cuda"
        # the pieces the parts share, made first and handed to each
        self.state = StepState()  # the open step and the next (steps_run, ended, ...), and its times
        self.outputs = Outputs(warn, ctx.rank, ctx.world_size)  # every file and metric: failures never reach training
        self.clock, self._closed = self.state, False  # the step clock is the step state: one object on the hot path
        layout = TraceLayout(ctx.output_dir, ctx.run_name)
        self.mem = MemoryWatch(config, ctx.rank, ctx.device, layout.run_dir,
                               lambda msg: warn("memory_history", InstrumentUnavailableWarning, msg), self.outputs)
        growth = MemoryGrowth(ctx.device, lambda msg: warn("memory_growth", MemoryGrowthWarning, msg),
                              config.profile_memory) if config.memory else None  # held at logged steps' start
        self.compile = watch = CompileWatch(warn, self._compiled)  # torch.compile, once torch._dynamo is loaded
        self.flops = flops = StepFlops(config, ctx, warn, compiling=lambda: watch.active)  # FLOPs per step, the peak
        rates = partial(interval_rates, flops, watch, self.state)  # the interval's TFLOP/s, MFU and compile figures
        self.monitor = StepMonitor(config, ctx, warn, self.outputs, rates=rates)
        self.windows = WindowRecorder(config, ctx, self.nvtx, warn, outputs=self.outputs, clock=self.clock,
                                      layout=layout, mem=self.mem, trace_meta=self.flops.meta,
                                      module_flops=self.flops.module_flops,
                                      growth_meta=growth.meta if growth is not None else None)
        self.files = RunFiles(self.windows)  # the traces exported, and where each is now
        self.phases = PhaseRanges(self.state, self.nvtx, self.mem, self.windows)  # the open phase, its ranges
        # validation, checkpoints, compilation and our own work: left out of step time
        self.aside = SetAside(self.state, self.clock, self.monitor, self.phases, self.compile, self.windows, now)
        self.captures = EngineCaptures(config, ctx, self.windows, self.outputs, warn, self.state)  # core/capture*.py
        self.steps = steps = StepLog(layout.run_dir, ctx, self.cuda)  # every step's row: the hot path's _step_row
        self.intervals = IntervalLog(ctx.log_every_n_steps, self.state, self.monitor, self.aside,
                                     MemorySampler(ctx.device, nvml=config.nvml) if config.memory else None, growth,
                                     self.mem, self.captures, self.windows, self.outputs, warn, ctx.log_min_interval_s,
                                     steps)
        self.windows.handoff.ledger_so_far = so_far_of(self)  # each window's sidecar: the run's ledger so far
        self._flops_on = self.flops.wants_hooks  # until the FLOPs are known: then no cost on the hot path
        self._log_every, self._nsys_steps, self._step_row = ctx.log_every_n_steps, config.nsys_steps, steps.rows.append
        # the verbs a part answers for the engine: bound once (no call in between on the hot path)
        self.phase, self.end_phase, self.tool_time = self.phases.enter, self.phases.leave, self.aside.tool_time
        self.validation_start, self.validation_end = self.aside.validation_start, self.aside.validation_end
        self.checkpoint_start, self.checkpoint_end = self.aside.checkpoint_start, self.aside.checkpoint_end
        self.locate, self.report_findings = self.files.locate, self.monitor.findings
        self.exit_cause = ExitCause()  # at interpreter exit: the exception that ends the process, if known
        self._at_exit = close_at_exit(self, PerfEngine._close_at_exit)  # an engine its owner never closed
        self.hang = watch_engine(self, config.hang_timeout, ctx.rank, ctx.world_size, layout.run_dir)

    step: Derived[int | None] = Derived(lambda e: e.state.step, "The open step (None before the first).")
    steps_run: Derived[int] = Derived(lambda e: e.state.steps_run, "Optimizer steps completed in this run.")
    memory: Derived[MemorySampler | None] = Derived(lambda e: e.intervals.memory,
                                                    "The device memory sampler (None: off, or it failed).")
    growth: Derived[MemoryGrowth | None] = Derived(lambda e: e.intervals.growth,
                                                   "The memory held at logged steps (None: off, or it failed).")
    exported: Derived[list[Any]] = Derived(lambda e: e.files.exported, "Trace files written so far (RunFiles).")
    exported_urls: Derived[list[str]] = Derived(lambda e: e.files.exported_urls, "Where each of ``exported`` goes.")
    layout: Derived[TraceLayout] = Derived(lambda e: e.files.layout, "Where this run's windows go.")
    run_dir: Derived[Path] = Derived(lambda e: e.windows.layout.run_dir, "The run's folder (local; see locate).")

    def attach_model(self, model: torch.nn.Module) -> None:
        """The model that gets per-module NVTX ranges inside windows (``nvtx_modules``)."""
        self.windows.model = self.flops.model = model

    def attach_owners(self, owners: Owners) -> None:
        """Where the run's models and optimizers are: their bytes by part go into each window and the OOM summary."""
        device = self.ctx.device
        self.windows.parts = WindowParts(owners, device.type if device is not None else "cpu", device_capacity(device))
        self.mem.oom.owners = owners

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
        t, state, phases = time.perf_counter(), self.state, self.phases
        if state.ended:  # the fetch opens the next step, or waits for its number (pending)
            if (step := state.expected) is not None:
                self._begin(step, t)
            elif state.pending_t is None:
                state.pending_t = t
        state.t_data = t  # the clock's fetch start (the state is the clock)
        phases.name = "data_wait" if phases.plain else phases.enter("data_wait")  # the fast case without a call

    def data_end(self) -> None:
        """The DataLoader handed over the batch (call right after ``next(iterator)`` returned or raised)."""
        t, clock, phases = time.perf_counter(), self.state, self.phases  # the state is the clock
        if (t_data := clock.t_data) is not None:
            clock.wait, clock.t_data, clock.loader_timed = clock.wait + t - t_data, None, True
        phases.name = "framework" if phases.plain else phases.enter("framework")

    def batch_start(self, step: int, phase: str | None = "forward") -> None:
        """A micro-batch of optimizer step ``step`` starts, in ``phase`` (None: no phase range until the next)."""
        state, phases = self.state, self.phases
        if (done := state.done) is not None and step <= done:  # a count that did not move: never reuse a number
            step = done + 1
        if state.ended or step != state.step:
            self._begin(step, time.perf_counter())
        if self._flops_on:  # the FLOP-counting step starts at its first micro-batch (see core/flops/step.py)
            self._flops_on = self.flops.batch_start(state.step or 0, state.micro, self.windows.action.value != 0)
        if phase is not None:
            phases.name = phase if phases.plain else phases.enter(phase)

    def batch_end(self, stepped: bool, samples: int | None = None) -> None:
        """A micro-batch of ``samples`` samples ended; ``stepped`` is True when it completed an optimizer step."""
        phases, state = self.phases, self.state
        if phases.plain:  # phases.leave() without the call
            phases.name = None
        elif phases.name is not None:
            phases.leave()
        state.micro += 1
        if samples:
            state.samples += samples
        if self._flops_on:
            self._flops_on = self.flops.batch_end(stepped, state.micro)
        if stepped and not state.ended and (step := state.step) is not None:
            # the step completes, written in place: its time at its optimizer step (the last step's, if no step
            # follows; the state is the clock)
            state.last_elapsed = max(time.perf_counter() - state.t_begin - state.aside, 0.0)
            state.ended, state.expected, state.done = True, step + 1, step
            state.steps_run += 1
            if (step + 1) % self._log_every == 0 or phases.recording or self._nsys_steps is not None:
                self._completed(step)
        phases.name = "framework" if phases.plain else phases.enter("framework")

    def _completed(self, step: int) -> None:
        """After step ``step`` completed: the logging step, a window's step, the end of an Nsight capture."""
        phases = self.phases
        if self._nsys_steps is not None and step == self._nsys_steps[1]:
            self.windows.nsys.stop(step)
        if (step + 1) % self._log_every == 0:  # the steps measured so far (this one is not yet)
            self.intervals.multiple(step + 1)
        if phases.recording:
            with self.tool_time("window"):
                if self.windows.step_completed():
                    phases.recording = False
                    self.state.mark_unclean()
            phases.replain()

    def _begin(self, step: int, t: float) -> None:
        phases, state, windows = self.phases, self.state, self.windows  # the state is the clock
        if phases.plain:  # phases.leave() without the call
            phases.name = None
        elif phases.name is not None:
            phases.leave()
        if state.step is not None:
            self._end_step(state.pending_t if state.pending_t is not None else t)
        else:  # the first step: the ledger's end of start-up (core/engine/ledger_stamps.py)
            state.t_first = t if state.pending_t is None else state.pending_t
        if (pending := state.pending_t) is not None:
            t, state.pending_t = pending, None
        state.step, state.ended, state.expected, state.micro, state.samples, state.own = step, False, step, 0, 0, None
        state.t_begin, state.aside, state.ours = t, 0.0, 0.0  # clock.begin(t, carry_wait=pending is not None)
        if pending is None:
            state.wait = 0.0
        if not state.steps_run and not self.compile.installed:  # a model compiled after the engine was made
            self.compile.install()
        if self.mem.history_at is not None:
            self.mem.step_begins(step)
        if step >= self.intervals.held_at:  # a logged step: the memory held at its start (before a window starts)
            self.intervals.read_held(step)
        if phases.nvtx_on:
            self.nvtx.push_step(step)
        if (self._nsys_steps is None and not (handoff := windows.handoff).jobs and handoff.uploads is None
                and step < windows.quiet_until):
            phases.recording = False  # windows.step_starts(step) before the schedule's next window, inlined
        else:
            phases.recording = windows.step_starts(step)
        if phases.recording or not phases.plain:  # else no flag changed since the last replain
            phases.replain()

    def _end_step(self, t: float | None) -> None:
        """Measure the step that ended; ``t``: when the next began (None: at its optimizer step, no step follows)."""
        state, step = self.state, self.state.step  # the state is the clock
        if self.phases.nvtx_on and t is not None:
            self.nvtx.pop()
        if compiled := self.compile.dirty:  # the step compiled: its recompilations and graph breaks; not comparable
            state.mark_unclean()
            self.compile.poll(step)
        if not state.ended or step is None:  # abandoned: no optimizer step completed (a `break`, a resumed count)
            return
        elapsed = state.last_elapsed if t is None else max(t - state.t_begin - state.aside, 0.0)  # clock.elapsed
        skip = (counted := step == self.flops.counted_step) or self.windows.action is not Action.NONE
        self._step_row((step, elapsed, state.samples, state.wait, state.aside - state.ours,  # core/engine/step_log.py
                        compiled * COMPILED + skip * WINDOW))
        if skip:
            self.intervals.not_comparable(counted)  # its ops ran through the FLOP counter, or it was profiled
        else:
            if (monitor := self.monitor).data_wait_check.done or not state.loader_timed:  # no data-wait check to feed
                monitor.stats.update(elapsed, state.wait, state.samples, state.micro, step)  # monitor.measured, inlined
            else:
                monitor.measured(step, elapsed, state.wait, state.samples or None, state.loader_timed, state.micro)
            if elapsed > self.intervals.spike_limit:
                self.captures.spiked(step, elapsed)

    def log_short_run(self) -> bool:
        """A run that ends before its first logging step logs its interval once, at its last step; True if it did.

        :meth:`close` calls it after the window's export; the Accelerate adapter first, to send it with its flush.
        """
        return self.intervals.short_run(self._end_step, self.tool_time)

    def _compiled(self, seconds: float) -> None:  # torch.compile compiled (its watch holds this weakly, not the engine)
        self.aside.compiled(seconds)

    # ---- end of training ---------------------------------------------------------------------------------------
    def note_failure(self, exc: BaseException, phase: str | None = None) -> None:
        """An exception leaves ``phase`` (default: the open one) before :meth:`close` runs: remember where it was."""
        self.mem.note_failure(exc, self.state.step, phase or self.phases.name)

    def close(self, exc: BaseException | None = None, batch: Any = None) -> None:
        """Stop everything and flush: the partial trace of an interrupted window is exported. Never raises.

        On ``torch.OutOfMemoryError`` the rank's ``oom-rank{R}/`` evidence is written first (``batch``: the failing
        batch if the adapter knows it, else the innermost ``batch`` local of the traceback).
        """
        if not self._closed:
            self._closed = True
            close_engine(self, exc, batch)

    def _close_at_exit(self) -> None:
        """Closed at the interpreter's exit, as its owner would (with the exception that ends the process, if known)."""
        self.windows.at_exit = True  # a session still warming up is left as it is
        self.close(self.exit_cause())

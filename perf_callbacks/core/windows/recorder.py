"""Profiling windows: the schedule's decision per step, one profiler session per window, export, summary.

A window's session is created at the first activity of its first step (never for a step that does not run), so a
run that ends just before or inside a window leaves no phantom ``ProfilerStep#N``. A window is exported under the
steps it really holds (``window-AAAAAA-BBBBBB`` names the first and last step recorded), marked partial in its
summary when it holds fewer steps than scheduled, and not exported at all without a completed step. When training
ends cleanly, a last step that did not complete its optimizer step is left out of the name, the count and the trace;
a step interrupted by an exception stays, and the summary says what interrupted it.

This module holds the schedule's action at each step (the session created, warmed up, started, marked, stopped; the
instruments that follow the recording on and off; standing aside for another profiler). What a window writes into its
trace besides the profiler's events is gathered in ``core/windows/trace_meta.py``; its export, its background job and
what the job reports are in ``core/windows/handoff.py`` (the recorder's ``handoff``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.clock import StepClock
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.core.files.remote import Uploads
from perf_callbacks.core.files.traces import TraceLayout
from perf_callbacks.core.memory.parts import WindowParts
from perf_callbacks.core.memory.watch import MemoryWatch
from perf_callbacks.core.ranges.module_ranges import ModuleRanges
from perf_callbacks.core.ranges.nsys import NsysCapture
from perf_callbacks.core.ranges.nvtx import NvtxRanges
from perf_callbacks.core.timing.worker_load import LoadMark
from perf_callbacks.core.triggers.captures import CaptureSchedule
from perf_callbacks.core.triggers.schedule import Action, Schedule
from perf_callbacks.core.warn import WarnFn, quiet
from perf_callbacks.core.windows import trace_meta
from perf_callbacks.core.windows.background import start_worker
from perf_callbacks.core.windows.handoff import WindowHandoff
from perf_callbacks.core.windows.profiler import ProfilerSession, foreign_profiler_running
from perf_callbacks.exceptions import InstrumentUnavailableWarning


class WindowRecorder:
    """Runs the profiler windows of one rank: the schedule's action at each step.

    Args:
        config: the validated configuration.
        ctx: the run's context.
        nvtx: the engine's NVTX ranges (per-module ranges are added to them inside windows).
        warn: ``warn(key, category, message, main_only)``, the engine's warn-once.
        outputs: the run's writers, shared with the engine and the adapters (default: a guard of its own).
        clock: the engine's step clock (whether the loop's data wait was measured).
        layout: where the run's windows go (default: ``ctx.output_dir`` / ``ctx.run_name``).
        mem: the engine's memory watch (allocator history follows the windows).
        trace_meta: the engine's FLOPs, into each trace's metadata.
        module_flops: the engine's FLOPs by module, and the note on them.
        growth_meta: the run's memory growth, once measured.
    """

    def __init__(self, config: PerfConfig, ctx: RunContext, nvtx: NvtxRanges, warn: WarnFn, *,
                 outputs: Outputs | None = None, clock: StepClock | None = None, layout: TraceLayout | None = None,
                 mem: MemoryWatch | None = None, trace_meta: Callable[[], dict[str, Any]] | None = None,
                 module_flops: Callable[[], tuple[dict[str, int] | None, str]] | None = None,
                 growth_meta: Callable[[], dict[str, Any] | None] | None = None) -> None:
        self.config, self.ctx, self._warn = config, ctx, warn
        self.outputs = outputs or Outputs(warn, ctx.rank, ctx.world_size)  # the engine's, shared with the adapters
        self.schedule = CaptureSchedule(Schedule(config.schedule), config.capture_max_per_hour)  # + captured windows
        self.schedule.wake = self._wake
        self.layout = layout or TraceLayout(ctx.output_dir, ctx.run_name)
        self.enabled = config.ranks is None or ctx.rank in config.ranks
        self.is_reporter = config.summary and self.enabled and ctx.rank == min(config.ranks or [0])
        self.cuda = ctx.device is not None and ctx.device.type == "cuda"
        self.nsys = NsysCapture(config.nsys_capture, set(config.ranks) if config.ranks else None, ctx.rank)
        spans = config.module_spans
        self.module_ranges = ModuleRanges(nvtx, spans) if config.nvtx_modules or spans else None
        self.model: torch.nn.Module | None = None
        self.session: ProfilerSession | None = None
        self.action = Action.NONE
        self.quiet_until: float = 0  # the schedule's action is NONE for every step before this one (set by begin_step)
        self.steps: list[int] = []  # steps begun while recording, in this window
        self.completed = 0  # of those, steps that finished their optimizer step
        self._retracted: int | None = None  # a step begun in this window that never completed (training ended)
        self.stall_s = 0.0  # the training loop's wait at the last window's end
        self._t_finish = 0.0
        self._skip: tuple[int, int] | None = None  # a window left to another profiler
        if self.enabled:
            start_worker()  # the thread that finishes windows, started now rather than at a window's end
        self.compile_s = 0.0  # torch.compile's seconds in the window's recorded steps (added by the engine)
        self.clock = clock or StepClock()  # the engine's: whether the loop's data wait was measured
        self.mem = mem  # the engine's: allocator history follows the windows
        self.trace_meta = trace_meta  # the engine's FLOPs, into each trace's metadata
        self.module_flops = module_flops  # the engine's, by module
        self.growth_meta = growth_meta  # the run's memory growth, once measured (None: off, or it failed)
        self._load: LoadMark | None = None  # the counters at the window's start: its load goes into its trace
        self.parts: WindowParts | None = None  # the engine's: parameters, gradients, optimizer state into each trace
        self.at_exit = False  # closed by the interpreter's exit: a session still warming up is left as it is
        self.handoff = WindowHandoff(config, ctx, warn, self.outputs, schedule=self.schedule, layout=self.layout,
                                     clock=self.clock, mem=mem, is_reporter=self.is_reporter, fail=self._fail)

    @property
    def exported(self) -> list[Path]:
        """Traces written so far (their jobs finished)."""
        return self.handoff.exported

    @property
    def uploads(self) -> Uploads | None:
        """The uploads to a remote ``output_dir``, None for a local one."""
        return self.handoff.uploads

    def poll(self) -> None:
        """Report the background jobs that finished (:meth:`WindowHandoff.poll`)."""
        self.handoff.poll()

    def wait(self, timeout_s: float, last_page: bool = False) -> None:
        """Wait for the background jobs, ``timeout_s`` in all, then the run's page (:meth:`WindowHandoff.wait`)."""
        self.handoff.wait(timeout_s, last_page)

    def nothing_recorded_line(self, steps_run: int) -> str:
        """Why no trace was written (:meth:`WindowHandoff.nothing_recorded_line`)."""
        return self.handoff.nothing_recorded_line(steps_run)

    # ---- per step ------------------------------------------------------------------------------------------------
    def step_starts(self, step: int) -> bool:
        """Step ``step`` begins (the engine's): nsys's range, finished windows' jobs; True when the step is recorded."""
        nsys_steps = self.config.nsys_steps
        if nsys_steps is not None and step == nsys_steps[0]:
            self.nsys.start(step)
        handoff = self.handoff
        if (handoff.jobs or handoff.uploads is not None) and handoff.busy:  # the property only when it can be true
            handoff.poll()
        # before the schedule's next window the action stays NONE (quiet_until, set by begin_step): no call
        return step >= self.quiet_until and self.begin_step(step)

    def begin_step(self, step: int) -> bool:
        """The schedule's action for ``step``, taken at the step's first activity; True when the step is recorded."""
        self.action = self.schedule.action(step) if self.enabled else Action.NONE
        if self.action is Action.NONE:
            self.quiet_until = self.schedule.next_active(step)
            if self.schedule.pending:  # a request came in meanwhile (a signal, the request file's thread)
                self.quiet_until = 0
            return False
        self.quiet_until = 0
        try:
            return self._enter(step)
        except Exception as err:  # noqa: BLE001 - instrumentation must never break training
            self._fail(err)
            return False

    def _wake(self) -> None:
        """A captured window was planned or requested: the engine asks for the next step's action."""
        self.quiet_until = 0

    def step_completed(self) -> bool:
        """The open step finished its optimizer step; exports the window after its last step (True then)."""
        if self.session is None:
            return False
        if self.session.recording:
            self.completed += 1
        if self.action is not Action.RECORD_AND_SAVE:
            return False
        self.finish(None)
        return True

    def _enter(self, step: int) -> bool:
        if self.session is None:
            planned = self.schedule.window(step)
            if self._skip == planned or self._foreign(step, planned):
                return False
            self.session = ProfilerSession(self.config, self.cuda, self.ctx.distributed_info)
            trace_meta.preset_meta(self.session, self.ctx, self.cuda, self.config.peak_tbps, self.trace_meta,
                                   self.growth_meta)
            self.steps, self.completed, self._retracted = [], 0, None
            self.compile_s = 0.0
            if self.mem is not None:
                self.mem.oom.window_started(step)
        if self.session.stolen:
            self._stolen(step)
            return False
        if self.action is Action.WARMUP:
            self.session.prepare()
            return False
        if not self.session.recording:
            if self._foreign(step, self.schedule.window(step)):  # started during our warm-up: ours was only prepared
                self.session = None  # and is dropped unstarted (stopping it would stop theirs)
                return False
            self.session.start()
            self._started(step)
        self.session.mark_step(step)
        self.steps.append(step)
        return True

    def _started(self, step: int) -> None:
        """The profiler records from ``step``: what the window measures besides it starts too."""
        self._load = trace_meta.load_mark(self.ctx)
        if self.parts is not None:
            quiet(self.parts.start)
        if self.config.nsys_steps is None:
            self.nsys.start(step)
        if self.module_ranges is not None and self.model is not None:
            self.module_ranges.install(self.model)
            if self.config.module_spans:
                quiet(lambda: trace_meta.module_meta(self.session, self.model, self.module_ranges, self.module_flops))

    def retract(self, step: int | None) -> None:
        """Training ended before the open step completed its optimizer step: leave it out of the window and its trace.

        The window is then named, counted and traced by its completed steps (``core/windows/trace_cut.py``).
        """
        if self.steps and self.steps[-1] == step:
            self._retracted = self.steps.pop()

    def _foreign(self, step: int, planned: tuple[int, int]) -> bool:
        """Another torch.profiler is running: stand aside for the ``planned`` window and say so once."""
        if not foreign_profiler_running():
            return False
        self._skip = planned
        self._warn("foreign_profiler", InstrumentUnavailableWarning, (
            f"another torch.profiler is already running at step {step} (your own torch.profiler.profile, "
            "Trainer(profiler='pytorch'), or a second perf-callbacks instance); perf-callbacks stands aside "
            f"and records no trace for steps {planned[0]}-{planned[1]}. NVTX ranges and metrics go on"), False)
        return True

    # ---- end of a window ---------------------------------------------------------------------------------------
    def finish(self, error: BaseException | None) -> None:
        """Stop the session and hand its trace to a background job (a partial window too, if a step completed)."""
        session, self.session = self.session, None
        if session is None:
            return
        t0 = self._t_finish = time.perf_counter()
        if session.stolen:  # stopping or exporting a session whose profiler is gone crashes inside torch
            self.session = session
            self._stolen(self.steps[-1] if self.steps else -1)
            return
        if self.at_exit and not session.recording:  # only warming up: nothing to export, and starting Kineto as the
            self._instruments_off()  # interpreter shuts down (stop() starts a prepared session first) is no flush
            return
        try:
            mark, self._load = self._load, None  # the window's load and parts into its trace
            trace_meta.record_load(session, self.ctx, mark)
            trace_meta.record_parts(session, self.parts)
            self._instruments_off()
            recorded = session.recording
            session.stop()
            if recorded and self.steps and (self.completed > 0 or error is not None):  # an interrupted step ran
                self.handoff.export(session, error, self.steps, completed=self.completed, retracted=self._retracted,
                                    compile_s=self.compile_s, t_finish=self._t_finish, analyse=self.enabled)
        except Exception as err:  # noqa: BLE001
            self._fail(err)
        finally:
            self.stall_s = time.perf_counter() - t0

    def note_gradients(self) -> None:
        """The window's first optimizer step begins: read its gradients (the window's end may have none)."""
        if self.parts is not None:
            quiet(self.parts.optimizer_step)

    def _stolen(self, step: int) -> None:
        """Another profiler stopped ours mid-window: drop the session (never touch it again) and say so once."""
        self.session = None
        quiet(self._instruments_off)
        planned = self.schedule.window(self.steps[0] if self.steps else step)
        self._skip = planned
        self._warn("stolen", InstrumentUnavailableWarning, (
            f"another torch.profiler was started and stopped during perf-callbacks' window (steps {planned[0]}-"
            f"{planned[1]}), which ended perf-callbacks' profiler too: no trace is written for that window. Avoid "
            "running two profilers at once"), False)

    def _instruments_off(self) -> None:
        if self.config.nsys_steps is None and self.steps:
            self.nsys.stop(self.steps[-1])
        if self.module_ranges is not None:
            self.module_ranges.remove()

    def _fail(self, err: BaseException) -> None:
        session, self.session = self.session, None
        if self.module_ranges is not None:
            quiet(self.module_ranges.remove)
        if session is not None:
            quiet(session.stop)
        self.enabled = False
        self.outputs.failed("traces", err)  # "profiler disabled: No space left on device (ENOSPC): <path>; ..."

    def nothing_recorded(self) -> bool:
        """True when this rank was to profile, stood aside for no one, and recorded no window."""
        return self.enabled and not (self.handoff.exported or self.handoff.jobs or self.stood_aside)

    @property
    def stood_aside(self) -> bool:
        """A window was left to another profiler (and the user was told)."""
        return self._skip is not None

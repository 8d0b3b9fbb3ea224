"""Time set aside: validation, checkpoint saves, torch.compile's compilation and our own work (export, logging).

A part of :class:`~perf_callbacks.core.engine.engine.PerfEngine` (``engine.aside``). Each is left out of the open
step's time and data wait (``core/clock.py``: ``StepClock.set_aside``) and keeps its logging interval out of the
slowdown check (``StepState.clean``); validation and checkpoints get their own NVTX range and, inside windows, trace
span (``core/engine/phases.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from perf_callbacks.core.clock import StepClock
from perf_callbacks.core.engine.phases import PhaseRanges
from perf_callbacks.core.engine.step_state import StepState
from perf_callbacks.core.flops.compile_watch import CompileWatch
from perf_callbacks.core.spans import enter_span, exit_span
from perf_callbacks.core.timing.monitor import StepMonitor
from perf_callbacks.core.windows.recorder import WindowRecorder


class SetAside:
    """Validation, checkpoints, compilation and :meth:`tool_time`, as the engine sets them aside.

    Args:
        state: the engine's step state (an interval with time set aside is not clean).
        clock: the engine's step clock, that leaves the time out of the open step.
        monitor: the engine's step statistics, that add our own work to the overhead.
        phases: the engine's phase ranges (validation is a phase; a checkpoint, a range nested in one).
        compile: the engine's torch.compile watch (a compilation in validation is no recompile storm).
        windows: the engine's windows (a window's summary tells its compile time).
        now: the engine's clock (``core/engine/engine.py``'s ``now``: every part reads the time the engine reads).
    """

    def __init__(self, state: StepState, clock: StepClock, monitor: StepMonitor, phases: PhaseRanges,
                 compile: CompileWatch, windows: WindowRecorder, now: Callable[[], float] = time.perf_counter) -> None:
        self.state, self.clock, self.monitor, self.now = state, clock, monitor, now
        self.phases, self.compile, self.windows = phases, compile, windows
        self.in_checkpoint = False  # a checkpoint save is open (read by the hang watchdog, core/hang/watchdog.py)
        self._t_validation = self._t_ckpt = 0.0
        # the ledger's set-aside seconds and counts inside steps (core/engine/ledger_stamps.py); none before the first
        self.totals = {"validation": 0.0, "checkpoint": 0.0, "compile": 0.0, "own": 0.0}
        self.counts = {"validation": 0, "checkpoint": 0, "compile": 0}

    def validation_start(self) -> None:
        """Validation inside training: its own range, and its time is left out of step time and data wait."""
        self._t_validation = self.now()
        self.state.mark_unclean()
        self.phases.enter("validation")

    def validation_end(self) -> None:
        """Validation finished."""
        self.clock.set_aside(seconds := self.now() - self._t_validation)
        self._count("validation", seconds)
        if self.compile.dirty:  # it compiled (e.g. for eval mode): never a recompile storm
            self.compile.poll(None)
        self.phases.enter("framework")

    def checkpoint_start(self) -> None:
        """A checkpoint save begins: a range nested in the current phase; its time is left out of step and wait."""
        self._t_ckpt = self.now()
        self.state.mark_unclean()
        self.in_checkpoint = True
        self.phases.checkpoint_start()

    def checkpoint_end(self) -> None:
        """The checkpoint save finished (or raised)."""
        self.in_checkpoint = False
        self.phases.checkpoint_end()
        if self.phases.name != "validation":  # else already left out as validation time
            self.clock.set_aside(seconds := self.now() - self._t_ckpt)
            self._count("checkpoint", seconds)

    def compiled(self, seconds: float) -> None:
        """torch.compile compiled for ``seconds`` (core/flops/compile_watch.py): set aside like validation."""
        self.state.mark_unclean()
        if self.phases.name != "validation":  # else already left out as validation time
            self.clock.set_aside(seconds)
            self._count("compile", seconds)
        if self.phases.recording:  # the window's summary says so
            self.windows.compile_s += seconds

    @contextmanager
    def tool_time(self, kind: str = "log") -> Iterator[None]:
        """Our own work (export, logging, a metric flush): not step time, but overhead; in windows, a span set aside."""
        rf = enter_span("perf_callbacks.overhead") if self.phases.recording and kind == "log" else None
        t0 = self.now()
        try:
            yield
        finally:
            exit_span(rf)
            self.spent(kind, self.now() - t0)

    def spent(self, kind: str, seconds: float) -> None:
        """``seconds`` of our own ``kind`` of work: set aside from the open step, added to the overhead."""
        self.clock.set_aside(seconds)
        self.clock.ours += seconds
        if self.state.step is not None:  # inside steps: the ledger's own work (before the first, start-up)
            self.totals["own"] += seconds
        self.monitor.overhead[kind] = self.monitor.overhead.get(kind, 0.0) + seconds

    def _count(self, kind: str, seconds: float) -> None:
        """The ledger's ``kind`` of set-aside time, inside steps only (before the first step it is start-up)."""
        if self.state.step is not None:
            self.totals[kind] += seconds
            self.counts[kind] += 1

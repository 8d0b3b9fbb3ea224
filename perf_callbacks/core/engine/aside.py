"""Time set aside: validation, checkpoint saves, torch.compile's compilation and our own work (export, logging).

Part of :class:`~perf_callbacks.core.engine.engine.PerfEngine` (a base class of it). Each is left out of the open step's
time and data wait (``core/clock.py``: ``StepClock.set_aside``) and keeps its logging interval out of the slowdown
check (``_clean``); validation and checkpoints get their own NVTX range and, inside windows, trace span.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from perf_callbacks.core.clock import StepClock
from perf_callbacks.core.flops.compile_watch import CompileWatch
from perf_callbacks.core.ranges.nvtx import NvtxRanges
from perf_callbacks.core.spans import enter_span, exit_span
from perf_callbacks.core.timing.monitor import StepMonitor
from perf_callbacks.core.windows.recorder import WindowRecorder


class SetAside:
    """Validation, checkpoints, compilation and :meth:`tool_time`, as the engine sets them aside."""

    clock: StepClock
    compile: CompileWatch
    monitor: StepMonitor
    nvtx: NvtxRanges
    windows: WindowRecorder
    _clean: bool  # no window, validation, checkpoint or compilation in this logging interval
    _recording: bool
    _nvtx_on: bool
    _phase: str | None
    _ckpt_rf: Any
    _t_aside: float
    _t_ckpt: float
    _in_checkpoint = False  # a checkpoint save is open (read by the hang watchdog, core/hang/watchdog.py)

    def phase(self, name: str) -> None:
        """The engine's phase ranges (``PerfEngine.phase``)."""
        raise NotImplementedError

    def _now(self) -> float:
        """The engine's clock (``PerfEngine._now``: ``time.perf_counter`` as ``core/engine/engine.py`` reads it)."""
        raise NotImplementedError

    def validation_start(self) -> None:
        """Validation inside training: its own range, and its time is left out of step time and data wait."""
        self._t_aside = self._now()
        self._clean = False
        self.phase("validation")

    def validation_end(self) -> None:
        """Validation finished."""
        self.clock.set_aside(self._now() - self._t_aside)
        if self.compile.dirty:  # it compiled (e.g. for eval mode): never a recompile storm
            self.compile.poll(None)
        self.phase("framework")

    def checkpoint_start(self) -> None:
        """A checkpoint save begins: a range nested in the current phase; its time is left out of step and wait."""
        self._t_ckpt = self._now()
        self._clean, self._in_checkpoint = False, True
        if self._nvtx_on:
            self.nvtx.push("checkpoint")
        if self._recording:
            self._ckpt_rf = enter_span("perf_callbacks.checkpoint")

    def checkpoint_end(self) -> None:
        """The checkpoint save finished (or raised)."""
        self._in_checkpoint = False
        if self._ckpt_rf is not None:
            rf, self._ckpt_rf = self._ckpt_rf, None
            exit_span(rf)
        if self._nvtx_on:
            self.nvtx.pop()
        if self._phase != "validation":  # else already left out as validation time
            self.clock.set_aside(self._now() - self._t_ckpt)

    def _compiled(self, seconds: float) -> None:
        """torch.compile compiled for ``seconds`` (core/flops/compile_watch.py): set aside like validation."""
        self._clean = False
        if self._phase != "validation":  # else already left out as validation time
            self.clock.set_aside(seconds)
        if self._recording:  # the window's summary says so
            self.windows.compile_s += seconds

    @contextmanager
    def tool_time(self, kind: str = "log") -> Iterator[None]:
        """Our own work (export, logging, a metric flush): not step time, but overhead; in windows, a span set aside."""
        rf = enter_span("perf_callbacks.overhead") if self._recording and kind == "log" else None
        t0 = self._now()
        try:
            yield
        finally:
            exit_span(rf)
            self._tool_spent(kind, self._now() - t0)

    def _tool_spent(self, kind: str, spent: float) -> None:
        """``spent`` seconds of our own ``kind`` of work: set aside from the open step, added to the overhead."""
        self.clock.set_aside(spent)
        self.monitor.overhead[kind] = self.monitor.overhead.get(kind, 0.0) + spent

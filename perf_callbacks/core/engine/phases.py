"""The engine's phase ranges: the open phase, its NVTX range and, inside windows, its trace span (and a checkpoint's).

A part of :class:`~perf_callbacks.core.engine.engine.PerfEngine` (``engine.phases``). Outside windows with no NVTX tool
attached (the usual case) a phase is only a name: :attr:`PhaseRanges.plain`, read on the hot path, says so.
"""

from __future__ import annotations

from typing import Any

from perf_callbacks.core.engine.step_state import StepState
from perf_callbacks.core.memory.watch import MemoryWatch
from perf_callbacks.core.ranges.nvtx import NvtxRanges
from perf_callbacks.core.spans import enter_span, exit_span
from perf_callbacks.core.windows.recorder import WindowRecorder


class PhaseRanges:
    """The open phase (``name``) and the ranges that mark it.

    Args:
        state: the engine's step state (the open step).
        nvtx: the engine's NVTX ranges.
        mem: the engine's memory watch (an armed step is told its phase boundaries).
        windows: the engine's windows (gradients are read at a recorded step's optimizer step).
    """

    def __init__(self, state: StepState, nvtx: NvtxRanges, mem: MemoryWatch, windows: WindowRecorder) -> None:
        self.state, self.nvtx, self.mem, self.windows = state, nvtx, mem, windows
        self.nvtx_on = nvtx.enabled  # no tool attached (the usual case): skip the calls on the hot path
        self.recording = False  # the open step is recorded by the profiler: phases get trace spans
        self.name: str | None = None  # the open phase
        self.span: Any = None  # the open phase's trace span
        self.ckpt_span: Any = None  # an open checkpoint's trace span
        self.plain = False  # a phase is only a name: no NVTX tool, no window, no armed memory step (see replain)

    def enter(self, name: str) -> str:
        """End the open phase and open ``name`` (NVTX always; a trace span inside windows); returns ``name``.

        The engine's hot path writes ``phases.name = name if phases.plain else phases.enter(name)``: no call in the
        usual case outside windows (``plain``), where a phase is only a name.
        """
        if self.plain:  # the usual case outside windows: nothing to close or open
            self.name = name
            return name
        if self.name is not None:
            self.leave()
        self.name = name
        if self.mem.armed:
            self.mem.phase(name, self.state.step)
            self.replain()  # the armed step's last phase disarms it
        if self.nvtx_on:
            self.nvtx.push(name)
        if self.recording:
            self.span = enter_span(f"perf_callbacks.{name}")
            if name == "optimizer_step" and (parts := self.windows.parts) is not None and not parts.grads_read:
                self.windows.note_gradients()  # inside windows only, once a window
        return name

    def leave(self) -> None:
        """Close the open phase's ranges, if any."""
        if self.name is None:
            return
        self.name = None
        if self.plain:
            return
        if self.nvtx_on:
            self.nvtx.pop()
        if self.span is not None:
            rf, self.span = self.span, None
            exit_span(rf)

    def replain(self) -> None:
        """Whether phases are only names until the flags change (at each step's begin, window end, logging step).

        ``nvtx_on``, ``recording``, an open phase span and the memory watch's ``armed`` are read here, so that a
        phase outside windows reads one flag.
        """
        self.plain = not (self.nvtx_on or self.recording or self.span is not None or self.mem.armed)

    def checkpoint_start(self) -> None:
        """A checkpoint save's range, nested in the open phase."""
        if self.nvtx_on:
            self.nvtx.push("checkpoint")
        if self.recording:
            self.ckpt_span = enter_span("perf_callbacks.checkpoint")

    def checkpoint_end(self) -> None:
        """The checkpoint save's range ends."""
        if self.ckpt_span is not None:
            rf, self.ckpt_span = self.ckpt_span, None
            exit_span(rf)
        if self.nvtx_on:
            self.nvtx.pop()

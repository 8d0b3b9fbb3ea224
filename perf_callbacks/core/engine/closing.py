"""How an engine closes: the order in which its parts stop, and what each leaves behind.

:meth:`PerfEngine.close <perf_callbacks.core.engine.engine.PerfEngine.close>` calls :func:`close_engine` once. Each part
stops under its own guard (:func:`~perf_callbacks.core.warn.quiet`), so one that fails never keeps the next from
stopping, and nothing here raises into training.
"""

from __future__ import annotations

import atexit
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from perf_callbacks.core.engine.captures import EngineCaptures
from perf_callbacks.core.engine.intervals import IntervalLog
from perf_callbacks.core.engine.ledger_line import console_line
from perf_callbacks.core.engine.ledger_stamps import close_stamps, closed, so_far_of
from perf_callbacks.core.engine.phases import PhaseRanges
from perf_callbacks.core.engine.step_log import StepLog
from perf_callbacks.core.engine.step_state import StepState
from perf_callbacks.core.flops.compile_watch import CompileWatch
from perf_callbacks.core.flops.step import StepFlops
from perf_callbacks.core.hang.watchdog import HangWatch
from perf_callbacks.core.memory.watch import MemoryWatch
from perf_callbacks.core.ranges.nvtx import NvtxRanges
from perf_callbacks.core.spans import exit_span
from perf_callbacks.core.warn import quiet
from perf_callbacks.core.windows.recorder import WindowRecorder

__all__ = ["close_engine", "so_far_of"]  # so_far_of: the run so far as a window closes (handed to its windows)

CLOSE_WAIT_S = 120.0
"""How long close waits for the last window's background job (compression, analysis).

Then, unless an exception ended training, the reporting rank rebuilds the run's page once more (a few seconds at most:
``PAGE_WAIT_S`` in ``core/windows/handoff.py``).
"""


class Closing(Protocol):
    """What closing reads of the engine (a ``PerfEngine``, which imports this module): its parts and three verbs."""

    is_main: bool
    hang: HangWatch | None
    state: StepState
    phases: PhaseRanges
    windows: WindowRecorder
    mem: MemoryWatch
    flops: StepFlops
    compile: CompileWatch
    nvtx: NvtxRanges
    captures: EngineCaptures
    steps: StepLog
    intervals: IntervalLog
    end_phase: Callable[[], None]
    _at_exit: Callable[[], None]  # its exit handler, unregistered here

    def log_short_run(self) -> bool:
        """Log a run shorter than one logging interval, once."""

    def record_no_windows(self) -> None:
        """Record no more windows."""


def close_engine(engine: Closing, exc: BaseException | None, batch: Any) -> None:
    """Stop every part of ``engine`` and flush (see ``PerfEngine.close``)."""
    t_close = time.perf_counter()  # the ledger's start of close (core/engine/ledger_stamps.py)
    state, phases, windows = engine.state, engine.phases, engine.windows
    if (hang := engine.hang) is not None:  # first: our own close (the window's export and analysis) is no hang, and
        quiet(lambda: hang.close(state.steps_run, clean=exc is None))  # a stall that ended is marked resumed
    if exc is not None:
        engine.mem.on_exception(exc, state.step, phases.name, batch)
    elif phases.recording and not state.ended:  # training ended before the open step's optimizer step: a fetch
        windows.retract(state.step)  # that found no batch, an epoch that ended mid-accumulation, a `break`
    atexit.unregister(engine._at_exit)
    for fn in (engine.flops.close, engine.compile.close, engine.end_phase,
               lambda: exit_span(phases.ckpt_span) if phases.ckpt_span is not None else None,
               lambda: windows.finish(exc), windows.nsys.close, engine.nvtx.pop_all,
               lambda: _stamped_flush(engine, t_close) if windows.uploads is not None else None,  # before the
               # remote upload's last pass: the step record and the ledger's stamps (close's end: the upload's start)
               lambda: windows.wait(CLOSE_WAIT_S, last_page=exc is None), engine.mem.oom.stop_history,
               engine.captures.close, engine.intervals.close):
        quiet(fn)
    phases.recording = False
    phases.replain()
    if exc is None:  # after the window's export: our logging is no span in its trace
        quiet(engine.log_short_run)
    if windows.uploads is None:  # the step record's last rows and the ledger's stamps (a remote one is uploaded)
        _stamped_flush(engine, t_close)
    if exc is None and engine.is_main and state.steps_run and windows.nothing_recorded():
        print(windows.nothing_recorded_line(state.steps_run), file=sys.stderr, flush=True)
    if exc is None and engine.is_main and state.steps_run:  # the ledger line (a failed run: report shows it)
        quiet(lambda: console_line(engine.steps))
    engine.record_no_windows()  # a hook that still calls a closed engine (a stale wrapper) starts no profiler
    closed()  # a later run of this process starts its ledger here


def _stamped_flush(engine: Closing, t_close: float) -> None:
    """The ledger's close stamps into the step record's description, then its last rows (never raises)."""
    quiet(lambda: engine.steps.stamps.update(close_stamps(engine, t_close, engine.steps.t0)))
    engine.steps.flush()

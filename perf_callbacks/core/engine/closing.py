"""How an engine closes: the order in which its parts stop, and what each leaves behind.

:meth:`PerfEngine.close <perf_callbacks.core.engine.engine.PerfEngine.close>` calls :func:`close_engine` once. Each part
stops under its own guard (:func:`~perf_callbacks.core.warn.quiet`), so one that fails never keeps the next from
stopping, and nothing here raises into training.
"""

from __future__ import annotations

import atexit
import sys
from typing import Any

from perf_callbacks.core.spans import exit_span
from perf_callbacks.core.warn import quiet

CLOSE_WAIT_S = 120.0
"""How long close waits for the last window's background job (compression, analysis).

Then, unless an exception ended training, the reporting rank rebuilds the run's page once more (a few seconds at most:
``PAGE_WAIT_S`` in ``core/windows/handoff.py``).
"""


def close_engine(engine: Any, exc: BaseException | None, batch: Any) -> None:
    """Stop every part of ``engine`` (a ``PerfEngine``, which imports this module) and flush (see its ``close``)."""
    if engine.hang is not None:  # first: our own close (the window's export and analysis) is no hang
        quiet(engine.hang.stop)
    state, phases, windows = engine.state, engine.phases, engine.windows
    if exc is not None:
        engine.mem.on_exception(exc, state.step, phases.name, batch)
    elif phases.recording and not state.ended:  # training ended before the open step's optimizer step: a fetch
        windows.retract(state.step)  # that found no batch, an epoch that ended mid-accumulation, a `break`
    atexit.unregister(engine._at_exit)
    for fn in (engine.flops.close, engine.compile.close, engine.end_phase,
               lambda: exit_span(phases.ckpt_span) if phases.ckpt_span is not None else None,
               lambda: windows.finish(exc), windows.nsys.close, engine.nvtx.pop_all,
               lambda: windows.wait(CLOSE_WAIT_S, last_page=exc is None), engine.mem.oom.stop_history,
               engine.captures.close):
        quiet(fn)
    phases.recording = False
    phases.replain()
    if exc is None:  # after the window's export: our logging is no span in its trace
        quiet(engine.log_short_run)
    if exc is None and engine.is_main and state.steps_run and windows.nothing_recorded():
        print(windows.nothing_recorded_line(state.steps_run), file=sys.stderr, flush=True)
    engine.record_no_windows()  # a hook that still calls a closed engine (a stale wrapper) starts no profiler

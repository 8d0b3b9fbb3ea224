"""The ledger's clock readings, written into the step record's description at close (``steps-rank{R}.json``).

The step record (``core/engine/step_log.py``) holds every completed step's time, data wait and the user's set-aside
time; the ledger (``analysis/ledger/``) adds up the run's wall time from it and from these readings, each in seconds
from the engine's construction: the process' start (``core/process_start.py``), the callback's construction, the
first step's start, the open step at close (its time to its optimizer step, its wait and set-aside time: the record
has no row for it yet) and the start of close; the set-aside seconds by kind inside steps (``SetAside.totals``) and
the hang watchdog's limit. The description's ``close_s`` is the end of close (its last write). Off the hot path:
read once, at close, and at each window's end for the run so far (:func:`so_far`, into the window's sidecar).
"""

from __future__ import annotations

import json
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

from perf_callbacks.core.process_start import process_age_s

__all__ = ["MAX_SO_FAR", "close_stamps", "closed", "interactive", "so_far", "so_far_of", "start_stamps"]
MAX_SO_FAR = 64_000  # characters: the sidecar's --meta is one argument (Linux takes 128 KiB at most)


_CLOSED: list[float] = []  # when this process' last engine finished closing (perf_counter)


def start_stamps() -> dict[str, Any]:
    """The readings known at the engine's construction: the process' start (absent where it cannot be read).

    In an interactive session (a notebook's kernel, ``python -i``) the time since the process started is the
    person's, not the run's: the ledger then starts at the callback's construction (``interactive``). A later run of
    the same process (a sweep, several ``fit`` calls, a test suite) starts where the run before it finished closing
    (``previous_run_s``): the time before that is the earlier runs'.
    """
    if interactive():
        return {"engine_s": 0.0, "interactive": True}
    if _CLOSED:
        return {"engine_s": 0.0, "previous_run_s": min(_CLOSED[-1] - time.perf_counter(), 0.0)}
    age = process_age_s()
    return {"engine_s": 0.0} if age is None else {"engine_s": 0.0, "process_start_s": -age}


def closed() -> None:
    """An engine of this process finished closing: the next run's ledger starts here."""
    _CLOSED[:] = [time.perf_counter()]


def interactive() -> bool:
    """A notebook's kernel or an interactive interpreter runs this process."""
    return "ipykernel" in sys.modules or hasattr(sys, "ps1") or bool(sys.flags.interactive)


def close_stamps(engine: Any, t_close: float, t0: float) -> dict[str, Any]:
    """The readings of ``engine`` (a ``PerfEngine``) as its close starts at ``t_close``, in seconds from ``t0``."""
    state, aside, hang = engine.state, engine.aside, engine.hang
    out: dict[str, Any] = {"close_begin_s": t_close - t0, "set_aside": dict(aside.totals),
                           "set_aside_count": dict(aside.counts), "hang_limit_s": _limit(hang)}
    if (created := engine.ctx.created_at) is not None:
        out["callback_s"] = created - t0
    if state.t_first is not None:
        out["first_step_s"] = state.t_first - t0
    if state.step is not None:
        out["open_step"] = {"step": state.step, "ended": state.ended, "begin_s": state.t_begin - t0,
                            "elapsed_s": state.last_elapsed, "wait_s": state.wait, "aside_s": state.aside,
                            "own_s": state.ours}
    return out


def so_far_of(engine: Any) -> Callable[[float], dict[str, Any] | None]:
    """:func:`so_far` of ``engine`` through a weak reference: its windows hold it, and must not keep it alive."""
    ref = weakref.ref(engine)
    return lambda t_finish: so_far(e, t_finish) if (e := ref()) is not None else None


def so_far(engine: Any, t_finish: float) -> dict[str, Any] | None:
    """The readings of the run so far, as a window of ``engine`` ends (it began to finish at ``t_finish``).

    As at close, with the window's finish (``t_finish``) as close's start and now as its end (our own work); the step
    record's rows are written first, so that the window's sidecar reads every completed step (``record``: its path).
    None when the record is off, or the readings would not fit the sidecar's command line (``MAX_SO_FAR``).
    """
    steps = engine.steps
    steps.flush()
    if steps.off or not steps.described:
        return None
    t0 = steps.t0
    out = {**steps.stamps, **close_stamps(engine, t_finish, t0), "close_s": time.perf_counter() - t0,
           "record": str(steps.path)}
    return out if len(json.dumps(out)) <= MAX_SO_FAR else None


def _limit(hang: Any) -> float | None:
    try:
        return float(hang.limit) if hang is not None else None
    except Exception:  # noqa: BLE001 - a limit is not worth a failure
        return None

"""Hang forensics: a watchdog thread per rank that leaves ``hang-rank{R}/`` when no step completes for a while.

When no step completed for ``hang_timeout``, it writes every thread's stack, the open step and phase and the Flight
Recorder's last collectives (``core/hang/dump.py``).

The training thread pays nothing for it: the watchdog reads the engine's own counters (``steps_run``, ``step``, the
open phase) from its thread once per poll. It never kills, unblocks or waits on the run; it writes once per hang and
re-arms when steps resume (the folder then says how long the stall lasted); the thread is a daemon, stopped at
``close``, and no exception leaves it. A run that closes cleanly (or after more steps) after it wrote was stalled, not
hung: ``close`` says so in the folder. Validation, checkpoint saves, torch.compile's compilation and the user's own
code (``core/hang/own_code.py``: from a step's optimizer step until the next step opens, and code the stack shows is
no step's forward) are allowed ``ASIDE_FACTOR`` times the timeout, counted from when the watchdog first saw them.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> state = Progress(steps_run=0, step=0, phase="forward", aside=None)
    >>> watch = HangWatch(lambda: state, Path(tempfile.mkdtemp()), rank=0, timeout=60.0)
    >>> watch.check(0.0), watch.check(59.0)
    (None, None)
    >>> watch.check(61.0).name
    'hang-rank0'
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from perf_callbacks.core.hang.dump import HangFacts, mark_resumed, training_thread_compiling, write_hang
from perf_callbacks.core.hang.own_code import AFTER_STEP, MAYBE, in_training_forward

__all__ = [
    "ASIDE_FACTOR",
    "FLOOR_S",
    "MEDIANS",
    "OWN_CODE",
    "HangWatch",
    "Progress",
    "auto_timeout",
    "engine_probe",
    "watch_engine",
]
log = logging.getLogger(__name__)
FLOOR_S = 300.0  # under torch's NCCL default timeout (10 min): the folder is written before torch ends the process
MEDIANS = 20  # a step 20x the median is no mere slow step (the slowdown alarm and anomaly windows see those)
ASIDE_FACTOR = 10  # validation, checkpoint saves, compilation: legitimately long, never a false alarm
MAX_POLL_S = 1.0
OWN_CODE = "own code"  # the aside the stack shows: the loop's own code where the adapter could not tell


class Progress(NamedTuple):
    """What the watchdog reads of the engine at each poll."""

    steps_run: int  # optimizer steps completed so far
    step: int | None  # the open step (None: none began yet: the watchdog is not armed)
    phase: str | None  # the open phase (forward, backward, data_wait, validation...)
    aside: str | None  # time that is not a step's: "validation", "checkpoint", "between steps" (None: in a step)
    maybe_own: bool = False  # the loop's own code or the step's forward: the training thread's stack says which


def auto_timeout(step_times: list[float]) -> float:
    """The default ``hang_timeout``: ``max(FLOOR_S, MEDIANS x the median step time)`` (the floor with no step yet).

    Example:
        >>> auto_timeout([]), auto_timeout([0.1] * 5), auto_timeout([30.0] * 5)
        (300.0, 300.0, 600.0)
    """
    return max(FLOOR_S, MEDIANS * statistics.median(step_times)) if step_times else FLOOR_S


class HangWatch:
    """Polls ``probe`` on a daemon thread; when no step completes for the timeout, writes ``run_dir/hang-rank{R}``.

    Args:
        probe: returns the engine's :class:`Progress`; called on the watchdog's thread.
        run_dir: the run folder; the evidence goes to ``run_dir/hang-rank{rank}``.
        rank: the global rank.
        timeout: seconds without a completed step; None: :func:`auto_timeout` of the step times seen.
        training_thread: ``threading.get_ident()`` of the thread that runs the steps (default: the caller's).
        extra: more facts for ``hang.json`` (the world size, the output folder), read when it fires.
    """

    def __init__(
        self,
        probe: Callable[[], Progress],
        run_dir: Path,
        rank: int,
        timeout: float | None,
        training_thread: int | None = None,
        extra: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.probe, self.run_dir, self.rank, self.timeout = probe, run_dir, rank, timeout
        self.training_thread = training_thread if training_thread is not None else threading.get_ident()
        self.extra = extra
        self.step_times: deque[float] = deque(maxlen=64)  # seconds per step, as the polls saw them
        self.fired: Path | None = None  # the folder written for the current hang (None: armed)
        self._seen: int | None = None  # steps_run at the last change
        self._t_seen = 0.0  # when it changed (or when an aside ended)
        self._aside_since: float | None = None
        self._aside: str | None = None  # the kind of aside seen at the last poll: a new kind counts from its start
        self._t_fired = 0.0
        self._fired_steps = 0  # steps_run when it wrote
        self._ended: tuple[int, bool] | None = None  # set by close: (steps_run, whether the run ended cleanly)
        self.removers: list[Callable[[], None]] = []  # hooks installed for it (own_code.mark_after_steps), off at close
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.gone: Callable[[], bool] = lambda: False  # what it watches is gone: the thread ends

    @property
    def limit(self) -> float:
        """The timeout in force for a step (explicit, or :func:`auto_timeout` of the step times seen so far)."""
        return self.timeout if self.timeout is not None else auto_timeout(list(self.step_times))

    def start(self) -> None:
        """Start the daemon thread (polling at most every second, ten times per explicit timeout)."""
        poll = min(MAX_POLL_S, self.timeout / 10) if self.timeout is not None else MAX_POLL_S
        self._thread = threading.Thread(target=self._run, args=(poll,), name="perf-callbacks-hang-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (returns at once when it is in the middle of writing; it is a daemon)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def close(self, steps_run: int, clean: bool) -> None:
        """Stop the thread and take its hooks off; ``steps_run`` at the end, ``clean``: no exception ended the run.

        A folder written before a clean end, or before more steps, was a stall that ended: its ``hang.json`` says so
        now (the thread's next poll would have, had the run gone on).
        """
        self._ended = (steps_run, clean)
        self.stop()
        for remove in self.removers:
            remove()
        self.removers = []
        self._resumed_at_close()

    def _resumed_at_close(self) -> None:
        fired, ended = self.fired, self._ended
        if fired is not None and ended is not None and (ended[1] or ended[0] > self._fired_steps):
            mark_resumed(fired, ended[0], max(time.monotonic() - self._t_fired, 0.0))

    def check(self, now: float) -> Path | None:
        """One poll at monotonic time ``now``: the folder written, when this poll found a hang, else None."""
        state = self.probe()
        if state.step is None:  # no step began yet: start-up is not watched
            return None
        if self._seen != state.steps_run:
            self._progressed(state.steps_run, now)
            return None
        aside = state.aside
        if not aside and self.fired is None:  # the stacks only when it matters
            past = now - self._t_seen > self.limit
            if state.maybe_own and (past or (self._aside_since is not None and self._aside == OWN_CODE)):
                aside = None if in_training_forward(self.training_thread) else OWN_CODE  # looked at every poll
            elif past:
                aside = "compiling" if training_thread_compiling(self.training_thread) else None
        if aside:
            if self._aside_since is None or aside != self._aside:
                self._aside_since, self._aside = now, aside
            self._t_seen = now  # the aside's time does not count against the next step
            waited, limit = now - self._aside_since, self.limit * ASIDE_FACTOR
        else:
            if self._aside_since is not None:  # it ended since the last poll: count from now, never from before
                self._t_seen, self._aside_since = now, None
            waited, limit = now - self._t_seen, self.limit
        if self.fired is not None or waited <= limit:
            return None
        self._t_fired, self._fired_steps = now, state.steps_run
        facts = HangFacts(
            self.rank,
            state.step,
            state.phase,
            state.steps_run,
            waited,
            limit,
            aside,
            self.training_thread,
            self.extra() if self.extra is not None else {},
        )
        self.fired = write_hang(self.run_dir / f"hang-rank{self.rank}", facts)
        self._resumed_at_close()  # close ran while it wrote (it reads fired after setting _ended: one of them sees it)
        return self.fired

    def _progressed(self, steps_run: int, now: float) -> None:
        if self._seen is not None and self._aside_since is None and steps_run > self._seen:
            self.step_times.append((now - self._t_seen) / (steps_run - self._seen))
        if self.fired is not None:  # steps resumed: a stall, not a hang; the next one writes again
            mark_resumed(self.fired, steps_run, now - self._t_fired)
            self.fired = None
        self._seen, self._t_seen, self._aside_since = steps_run, now, None

    def _run(self, poll: float) -> None:
        while not self._stop.wait(poll):
            if self.gone():
                return
            try:
                self.check(time.monotonic())
            except Exception:  # noqa: BLE001 - the watchdog never raises, never ends training
                log.debug("hang watch: poll failed", exc_info=True)


def watch_engine(engine: Any, timeout: float | None, rank: int, world_size: int, run_dir: Path) -> HangWatch | None:
    """Start the watchdog of ``engine`` (a ``PerfEngine``); None when ``timeout`` is 0 (off)."""
    if timeout == 0:
        return None
    watch = HangWatch(engine_probe(engine), run_dir, rank, timeout, extra=lambda: {"world_size": world_size})
    ref = weakref.ref(engine)
    watch.gone = lambda: ref() is None  # an engine never closed and collected: no thread left behind
    watch.start()
    return watch


def engine_probe(engine: Any) -> Callable[[], Progress]:
    """What the watchdog reads of ``engine``, through a weak reference (the thread keeps no engine alive).

    ``steps_run``, ``step``, the open phase, whether a checkpoint save is open, whether the open step ended or ran
    no micro-batch after its fetch (the loader ran out: the loop is over, or an epoch ends), and the adapter's mark of
    the loop's own code (``StepState.own``): attributes the engine keeps anyway, so its hot path does not change.
    """
    ref = weakref.ref(engine)

    def probe() -> Progress:
        e = ref()
        if e is None or e._closed:
            return Progress(0, None, None, None)
        phase, state = e.phases.name, e.state
        aside = "validation" if phase == "validation" else "checkpoint" if e.aside.in_checkpoint else None
        own = state.own
        # the step ended, its optimizer step completed, or its fetch found no batch
        idle = state.ended or own == AFTER_STEP or (phase == "framework" and not state.micro)
        return Progress(state.steps_run, state.step, phase, aside or ("between steps" if idle else None), own == MAYBE)

    return probe

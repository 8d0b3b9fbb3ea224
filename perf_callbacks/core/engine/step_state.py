"""The engine's step state: which optimizer step is open, whether it completed, and what the next one will be.

A step is *open* from its first activity (a fetch or a micro-batch) until the next step opens; it *completes* at its
optimizer step (then it has *ended*: the next activity opens the next step; a step that opened and never completed
was abandoned). A fetch that starts before the next step's number is known is *pending*: the step it opens starts at
that fetch. Read on the engine's hot path (``core/engine/engine.py``), which counts a step's micro-batches and samples
and moves an adapter's step number past the last completed step when the adapter's count did not move (a skipped
step) itself, with no call per micro-batch; and by the hang watchdog (``core/hang/watchdog.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from perf_callbacks.core.clock import StepClock
from perf_callbacks.core.hang.own_code import AFTER_STEP, MAYBE


@dataclass(slots=True)
class StepState(StepClock):
    """The open step and the steps around it (one per engine), with the open step's times.

    It is the engine's :class:`~perf_callbacks.core.clock.StepClock` too (``engine.clock is engine.state``): the hot
    path reads and writes one object per step, not two (outside windows each object a hook touches costs cache misses
    that cost more than the arithmetic).

    Attributes:
        step: the open step (None before the first).
        steps_run: optimizer steps completed in this run.
        ended: the open step completed: the next activity opens the next step.
        expected: the number of the next step, once known.
        done: the last step that completed its optimizer step.
        pending_t: when a fetch started before the next step's number was known.
        micro: micro-batches of the open step so far (0: its fetch found no batch).
        samples: samples of the open step so far (0: not known).
        last_elapsed: the last completed step's time up to its optimizer step (for a run with no step after it).
        clean: no window, validation, checkpoint or compilation in this logging interval: its times compare.
        logged: some logging interval was logged.
        own: the loop's own code may be running, as the adapter saw it (read by the hang watchdog): ``AFTER_STEP``
            from the open step's optimizer step until the next step opens, ``MAYBE`` where the adapter cannot tell
            it from the step's forward (the watchdog then reads the training thread's stack); None: the step's work.
        t_first: when the first step began (the ledger's end of start-up; None before it).
    """

    step: int | None = None
    steps_run: int = 0
    ended: bool = True
    expected: int | None = None
    done: int | None = None
    pending_t: float | None = None
    micro: int = 0
    samples: int = 0
    last_elapsed: float = 0.0
    clean: bool = True
    logged: bool = False
    own: str | None = None
    t_first: float | None = None

    def own_code(self, certain: bool = True) -> None:
        """The loop's own code may run from here (read by the hang watchdog; the engine clears it when a step opens).

        Args:
            certain: the open step's optimizer step completed: the own code runs until the next step opens. False:
                it may be the step's forward (the adapter clears it at the step's next phase).
        """
        self.own = AFTER_STEP if certain else MAYBE

    def mark_unclean(self) -> None:
        """Something not comparable happened in this logging interval: its slowdown check is skipped."""
        self.clean = False

"""Step-time bookkeeping: when a step began, how long it waited for data, and what time is not its own.

A step runs from its first activity (the DataLoader fetch of its first micro-batch, or the batch itself) to the first
activity of the next step, so it includes the framework's work after the optimizer step (logging, callbacks,
collectives), as ``ProfilerStep#N`` does in a ``for batch in loader: ...; prof.step()`` loop. Time set aside
(validation, checkpoint saves, perf-callbacks' own export and logging) is left out of both step time and data wait.
The engine's hot path (``core/engine/engine.py``) does what ``data_start``, ``data_end``, ``begin`` and ``elapsed`` do
in place, on these same attributes: a change here is a change there.

Example:
    >>> clock = StepClock()
    >>> clock.begin(10.0); clock.data_start(10.0); clock.data_end(10.2)
    >>> clock.set_aside(0.5)  # e.g. a checkpoint save
    >>> round(clock.elapsed(11.5), 3), round(clock.wait, 3)
    (1.0, 0.2)
"""

from __future__ import annotations


class StepClock:
    """Times the open step on the engine's ``perf_counter`` readings (seconds)."""

    def __init__(self) -> None:
        self.t_begin = 0.0
        self.wait = 0.0
        self.aside = 0.0
        self.loader_timed = False  # some step's data wait was measured inside the DataLoader
        self.t_data: float | None = None  # when the open fetch started (None: no fetch open)

    def begin(self, t: float, carry_wait: bool = False) -> None:
        """A new step begins at ``t``; ``carry_wait`` keeps the data wait measured before its number was known."""
        self.t_begin, self.aside = t, 0.0
        if not carry_wait:
            self.wait = 0.0

    def data_start(self, t: float) -> None:
        """``next(loader)`` is being called."""
        self.t_data = t

    def data_end(self, t: float) -> None:
        """``next(loader)`` returned or raised."""
        if self.t_data is not None:
            self.wait += t - self.t_data
            self.t_data = None
            self.loader_timed = True

    def set_aside(self, seconds: float) -> None:
        """Leave ``seconds`` of the open step out of its step time (validation, checkpoint, our own work)."""
        self.aside += seconds

    def elapsed(self, t: float) -> float:
        """Step time of the open step if it ended at ``t``."""
        elapsed = t - self.t_begin - self.aside
        return elapsed if elapsed > 0.0 else 0.0

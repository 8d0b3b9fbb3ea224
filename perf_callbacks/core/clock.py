"""Step-time bookkeeping: when a step began, how long it waited for data, and what time is not its own.

A step runs from its first activity (the DataLoader fetch of its first micro-batch, or the batch itself) to the first
activity of the next step, so it includes the framework's work after the optimizer step (logging, callbacks,
collectives), as ``ProfilerStep#N`` does in a ``for batch in loader: ...; prof.step()`` loop. Time set aside
(validation, checkpoint saves, perf-callbacks' own export and logging) is left out of both step time and data wait.

The engine's hot path (``core/engine/engine.py``: ``data_start``, ``data_end``, ``_begin``, ``batch_end`` and
``_end_step``) reads and writes these times in place, with no call per step, on its step state (``StepState`` is a
``StepClock``: one object per step, not two); the parts that set time aside call
:meth:`StepClock.set_aside`. The step's time is ``t - t_begin - aside``, never negative.

Example:
    >>> clock = StepClock()
    >>> clock.t_begin = 10.0
    >>> clock.set_aside(0.5)  # e.g. a checkpoint save
    >>> clock.aside
    0.5
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StepClock:
    """The open step's times on the engine's ``perf_counter`` readings (seconds).

    Attributes:
        t_begin: when the open step began.
        wait: its data wait so far: the time inside the DataLoader's ``next()``.
        aside: its time set aside so far (validation, checkpoints, our own work).
        ours: the part of ``aside`` that was our own work (export, logging): left out of the step record's set-aside
            time, which is the user's (``core/engine/step_log.py``).
        loader_timed: some step's data wait was measured inside the DataLoader (for the rest of the run).
        t_data: when the open fetch started (None: no fetch open).
    """

    t_begin: float = 0.0
    wait: float = 0.0
    aside: float = 0.0
    ours: float = 0.0
    loader_timed: bool = False
    t_data: float | None = None

    def set_aside(self, seconds: float) -> None:
        """Leave ``seconds`` of the open step out of its step time (validation, checkpoint, our own work)."""
        self.aside += seconds

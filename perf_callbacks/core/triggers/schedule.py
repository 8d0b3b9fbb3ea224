"""The profiling schedule as a pure function of the optimizer step, with ``torch.profiler.schedule``'s semantics.

Unlike Lightning's ``PyTorchProfiler`` it is evaluated on the global optimizer step, so ``ProfilerStep#N`` in a trace
is optimizer step ``N`` (with gradient accumulation too), and ``repeat`` is honoured.

Example:
    >>> from perf_callbacks.config import ScheduleConfig
    >>> s = Schedule(ScheduleConfig(skip_first=2, wait=1, warmup=1, active=2, repeat=2))
    >>> [s.action(i).name for i in range(10)]  # doctest: +NORMALIZE_WHITESPACE
    ['NONE', 'NONE', 'NONE', 'WARMUP', 'RECORD', 'RECORD_AND_SAVE',
     'NONE', 'WARMUP', 'RECORD', 'RECORD_AND_SAVE']
    >>> s.window(5)
    (4, 5)
"""

from __future__ import annotations

import enum
import math

from perf_callbacks.config import ScheduleConfig


class Action(enum.Enum):
    """What the profiler does during one optimizer step."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


class Schedule:
    """Maps an optimizer step to an :class:`Action`.

    Args:
        config: wait/warmup/active/repeat/skip_first, as in ``torch.profiler.schedule``.
    """

    def __init__(self, config: ScheduleConfig) -> None:
        self.config = config
        self.cycle = config.wait + config.warmup + config.active

    def action(self, step: int) -> Action:
        """The action for optimizer step ``step`` (0-based, the Trainer's ``global_step`` at the step's start)."""
        c = self.config
        if step < c.skip_first:
            return Action.NONE
        rel = step - c.skip_first
        if c.repeat > 0 and rel // self.cycle >= c.repeat:
            return Action.NONE
        pos = rel % self.cycle
        if pos < c.wait:
            return Action.NONE
        if pos < c.wait + c.warmup:
            return Action.WARMUP
        return Action.RECORD_AND_SAVE if pos == self.cycle - 1 else Action.RECORD

    def next_active(self, step: int) -> float:
        """The first step from ``step`` on whose action is not NONE (``inf`` when the schedule has no more windows)."""
        c = self.config
        rel = step - c.skip_first
        if rel < 0:
            rel = 0
        cycle, pos = divmod(rel, self.cycle)
        if c.repeat > 0 and cycle >= c.repeat:
            return math.inf
        if pos < c.wait:
            return c.skip_first + cycle * self.cycle + c.wait
        return max(step, c.skip_first)

    def window(self, step: int) -> tuple[int, int]:
        """First and last active step of the cycle that ``step`` belongs to."""
        c = self.config
        start = c.skip_first + ((step - c.skip_first) // self.cycle) * self.cycle + c.wait + c.warmup
        return start, start + c.active - 1

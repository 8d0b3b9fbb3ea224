"""Logging intervals: what the engine does at each logging step, and the memory held at the start of logged steps.

A part of :class:`~perf_callbacks.core.engine.engine.PerfEngine` (``engine.intervals``). Its work is our own: its time
is set aside from the open step (``core/engine/aside.py``), and a failure turns its instrument off, never training.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from perf_callbacks.core.engine.aside import SetAside
from perf_callbacks.core.engine.captures import EngineCaptures
from perf_callbacks.core.engine.peers import PeerBoard
from perf_callbacks.core.engine.step_log import StepLog
from perf_callbacks.core.engine.step_state import StepState
from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.core.flops.compile_watch import CompileWatch
from perf_callbacks.core.flops.step import StepFlops
from perf_callbacks.core.memory.growth import MemoryGrowth
from perf_callbacks.core.memory.sampler import MemorySampler
from perf_callbacks.core.memory.watch import MemoryWatch
from perf_callbacks.core.timing.ledger import IntervalLedger
from perf_callbacks.core.timing.monitor import StepMonitor
from perf_callbacks.core.warn import WarnFn
from perf_callbacks.core.windows.recorder import WindowRecorder
from perf_callbacks.exceptions import InstrumentUnavailableWarning, SlowRankWarning


def interval_rates(flops: StepFlops, compile: CompileWatch, state: StepState, metrics: dict[str, float]) -> None:
    """The interval's rates from its step time: ``train/tflops`` and MFU, and torch.compile's figures."""
    flops.add_metrics(metrics)
    compile.add_metrics(metrics, state.step)


class IntervalLog:
    """Logs each interval's metrics, reads the memory held at logged steps, and keeps the step-time spike limit.

    Args:
        every: the logging interval, in optimizer steps.
        state: the engine's step state.
        monitor: the engine's step statistics, that log the interval.
        aside: the engine's time set aside (the interval's logging is our own work).
        memory: the device memory sampler (None: memory is off).
        growth: the memory held at the start of logged steps, and its trend (None: memory is off).
        mem: the engine's memory watch (phase peaks).
        captures: the engine's captured windows (a spike above the interval's limit triggers one).
        windows: the engine's windows (each trace carries the memory growth while it is measured).
        outputs: the run's writers (a failing metrics logger turns ``metrics`` off).
        warn: the engine's warn-once.
        min_interval_s: the least wall time between two logged intervals: in a loop so fast that ``every`` steps
            take less, an interval spans the smallest multiple of ``every`` steps that lasts that long at the last
            interval's pace (as tqdm's ``mininterval``); 0: every ``every`` steps.
        steps: the run-wide step record, written at each logged interval (None: not kept).
    """

    def __init__(self, every: int, state: StepState, monitor: StepMonitor, aside: SetAside,
                 memory: MemorySampler | None, growth: MemoryGrowth | None, mem: MemoryWatch,
                 captures: EngineCaptures, windows: WindowRecorder, outputs: Outputs, warn: WarnFn,
                 min_interval_s: float = 0.0, steps: StepLog | None = None) -> None:
        self.every, self.state, self.monitor, self.aside = every, state, monitor, aside
        self.memory, self.growth, self.mem, self.captures = memory, growth, mem, captures
        if growth is not None:  # the growth warning opens the window that names its operator
            growth.follow = captures.growth_window
        self.windows, self.outputs, self._warn = windows, outputs, warn
        self.min_interval_s, self.steps = min_interval_s, steps
        self.due = every  # the step count at which the next interval is logged (a multiple of ``every``)
        self._last: tuple[int, float] | None = None  # the step count and the clock of the last logged interval
        self.held_at = every - 1 if growth is not None else sys.maxsize  # the next step whose start is read
        self.spike_limit = math.inf  # a measured step above it: an anomaly (refreshed at logging steps)
        ctx = windows.ctx  # several ranks: each publishes its intervals, rank 0 names one that holds the others back
        shared = ctx.world_size > 1 and ctx.remote is None  # a remote output_dir is staged per rank: off
        self.peers = PeerBoard(windows.layout.run_dir, ctx.rank, ctx.world_size) if shared else None
        self.ledger = IntervalLedger(aside.totals)  # perf/ledger/*: the interval's wall time by part

    def logging_step(self, step: int) -> None:
        """Log the interval that ends at ``step``: ``tool_time("log")`` without a generator outside windows."""
        if self.aside.phases.recording:
            with self.aside.tool_time("log"):
                self.log(step)
        else:
            t0 = self.aside.now()
            try:
                self.log(step)
            finally:
                self.aside.spent("log", self.aside.now() - t0)
        if self.mem.armed:  # the interval's logging armed the next memory-measured step
            self.aside.phases.plain = False

    def multiple(self, step: int) -> None:
        """``step`` steps completed, a multiple of ``every``: log the interval if it is due.

        Else, once ``min_interval_s`` has passed since the last logged interval (the loop slowed down since the pace
        that set ``due``), the next multiple becomes due, so that its start's memory is read first.
        """
        if step >= self.due:
            self.logging_step(step)
        elif (last := self._last) is not None and time.perf_counter() - last[1] >= self.min_interval_s:
            self._due_at(step + self.every)

    def _due_at(self, step: int) -> None:
        """The next interval is logged at ``step``: the memory held is read at that step's start (``step - 1``)."""
        self.due = step
        if self.growth is not None:
            self.held_at = step - 1

    def not_comparable(self, counted: bool) -> None:
        """A step's time is not its own: its ops ran through the FLOP counter (``counted``), or it was profiled.

        The engine measures every other step itself (``PerfEngine._end_step``: the interval's statistics, and a spike
        above ``spike_limit`` triggers a capture).
        """
        self.state.mark_unclean()
        if counted:
            self.monitor.set_aside()

    def read_held(self, step: int) -> None:
        """The memory held at the start of a logged step: our own work, set aside from the step (as logging is)."""
        self.held_at = sys.maxsize  # until the logging step sets the next
        t0 = self.aside.now()
        try:
            if self.growth is not None:
                self.growth.read(step)
        except Exception as err:  # noqa: BLE001 - instrumentation must never break training
            self.growth = self.windows.growth_meta = None
            self._warn("memory_growth_off", InstrumentUnavailableWarning,
                       f"reading the memory held at step start failed ({err!r}): the memory growth check is off")
        finally:
            self.aside.spent("log", self.aside.now() - t0)

    def short_run(self, end_step: Callable[[float | None], None],
                  tool_time: Callable[[str], AbstractContextManager[None]]) -> bool:
        """Log a run that ends before its first logging step once, at its last step (``PerfEngine.log_short_run``).

        ``end_step(None)`` measures the last step up to its optimizer step (no next step begins); the logging is our
        own work (``tool_time``). True if it logged.
        """
        state = self.state
        if state.logged or state.done is None:
            return False
        if state.ended and state.step == state.done:
            end_step(None)
        with tool_time("log"):
            self.log(state.done + 1, clean=False, opened=False)
        self.aside.phases.replain()
        return True

    def _memory_metrics(self, metrics: dict[str, float], step: int) -> None:
        if self.mem.peaks is not None:
            self.mem.log(metrics, step)
        if self.growth is not None:
            self.growth.add_metrics(metrics)

    def next_due(self, step: int, now: float) -> int:
        """The step count of the next logged interval, after one logged at ``step`` at ``now`` (``perf_counter``).

        The smallest multiple of ``every`` steps ahead that lasts ``min_interval_s`` at the pace of the interval that
        just ended (its wall time per step, ours included); ``every`` steps when there is no floor or no pace yet.
        """
        last, self._last = self._last, (step, now)
        if self.min_interval_s <= 0 or last is None or step <= last[0] or now <= last[1]:
            return step + self.every
        per_interval = (now - last[1]) / (step - last[0]) * self.every
        return step + self.every * max(1, math.ceil(self.min_interval_s / per_interval))

    def log(self, step: int, clean: bool = True, opened: bool = True) -> None:
        """Log the interval that ends at ``step``.

        ``clean``: its times may be compared, if the interval's were; ``opened``: the step that completed at ``step`` is
        open, its time not yet measured.
        """
        self.state.logged = True
        self._due_at(self.next_due(step, time.perf_counter()))
        try:
            extra = functools.partial(self._memory_metrics, step=step)
            stats, timed = self.monitor.stats, self.windows.clock.loader_timed
            times = stats.step_times  # the interval's, before log_interval starts the next
            if self.peers is not None:
                self._peers(step, times, stats.data_wait)
            state = self.state
            shares = self.ledger.metrics(self.aside.now(), state.t_first, sum(times), stats.data_wait, timed,
                                         (state.last_elapsed, state.wait) if opened and state.ended else None)
            self.monitor.log_interval(step, self.memory, clean and self.state.clean, timed, extra, shares)
            self.spike_limit = self.captures.interval(step, times, self.monitor.slowdown)
            self.state.clean = True
        except Exception as err:  # noqa: BLE001 - instrumentation must never break training
            self.memory = None
            self.outputs.failed("metrics", err)
        if self.steps is not None:
            self.steps.due()

    def _peers(self, step: int, times: list[float], data_wait: float) -> None:
        """The interval's figures to the other ranks (``core/engine/peers.py``); rank 0 warns once of a slow rank."""
        try:
            slow = self.peers.interval(step, times, data_wait) if self.peers is not None else None
        except Exception:  # noqa: BLE001 - instrumentation must never break training: the comparison is off
            self.peers = None
            return
        if slow is not None:
            self._warn("slow_rank", SlowRankWarning, slow.message())

    def close(self) -> None:
        """Stop the ranks' comparison thread, if any."""
        if self.peers is not None:
            self.peers.close()

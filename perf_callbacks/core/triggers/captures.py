"""Windows off the schedule: after an anomalous step, after the slowdown alarm, and on request (signal or file).

:class:`CaptureSchedule` wraps the :class:`Schedule`: the recorder asks it for each step's action as before, and a
captured window is recorded as a scheduled one is (same profiler settings, export and summary), without warm-up so
that it holds the very next step. A capture never overlaps a scheduled window (it ends before the next one's warm-up)
nor another capture, and anomaly captures are budgeted (``capture_max_per_hour``).

:class:`SpikeLimit` is the per-step bar of ``capture_on_anomaly``: k times the last logging interval's median step
time, with k from that interval's own spread (as the slowdown alarm's noise: 1.4826 x MAD / median), at least
:data:`K_MIN`, and at least :data:`MIN_EXCESS_S` above the median (a shorter delay is the scheduler or another
process, as ``MIN_SLOWDOWN_S`` is for the slowdown alarm: measured on a 2-core machine with both cores taken by other
processes, 10 ms steps were at most 50 ms longer than their median). It is refreshed at logging steps; the engine
compares each measured step with it (one comparison). A step above it must also be above the same bar on the run's own
time, its wait for a CPU taken off where Linux says (``core/triggers/wait.py``): the step less its own wait, against
the median less the interval's share of waiting, so that a busy machine does not make an anomaly.

Example:
    >>> from perf_callbacks.config import ScheduleConfig
    >>> s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=10, wait=1, warmup=1, active=2)))
    >>> s.open(Capture("anomaly", 3, 4, 5, step_ms=412.0, median_ms=121.0)), s.window(5)
    (True, (4, 5))
    >>> [s.action(i).name for i in range(3, 7)]
    ['NONE', 'RECORD', 'RECORD_AND_SAVE', 'NONE']
    >>> from perf_callbacks.analysis.windows.captured import capture_text
    >>> capture_text(s.capture_at(4).meta())
    'step 3 took 412 ms, 3.4x the median 121 ms'
"""

from __future__ import annotations

import collections
import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from perf_callbacks.core.timing.stats import Slowdown
from perf_callbacks.core.triggers.schedule import Action, Schedule
from perf_callbacks.core.triggers.wait import WaitSampler

log = logging.getLogger(__name__)
K_MIN = 2.5  # a step under 2.5x the median is no anomaly, whatever the spread
NOISE_Z = 6.0  # ... nor one within 6 robust standard deviations of it
MIN_EXCESS_S = 0.1  # ... nor one less than 100 ms longer than it (a scheduler hiccup)
MIN_STEPS = 5  # fewer measured steps leave the bar as it was: they are added to the next interval's
HOUR_S = 3600.0
REASONS = ("anomaly", "slowdown", "signal", "file", "memory_growth")
MAX_REQUEST_STEPS = 1000
"""The longest window a request may ask for: a larger ``steps`` is cut to this, with one log line. The profiler keeps
a window's events in memory until its last step and writes them as one trace (``max_trace_mb``): a few steps show a
pattern, and 1,000 steps of a real model are already gigabytes."""


@dataclass(frozen=True)
class Capture:
    """One captured window: why (``reason``), the step that said so, and the steps it records (``first``..``last``).

    ``step_ms``/``median_ms`` are the slow step's time and the median it was compared with (anomaly), or the slow
    intervals' median and the baseline (slowdown); ``request`` is the signal's name or the request file's id.
    """

    reason: str
    step: int
    first: int
    last: int
    step_ms: float | None = None
    median_ms: float | None = None
    request: str | None = None

    def meta(self) -> dict[str, Any]:
        """The window's ``capture`` block (in its sidecar and ``summary.txt``): plain data."""
        ratio = self.step_ms / self.median_ms if self.step_ms and self.median_ms else None
        out: dict[str, Any] = {
            "reason": self.reason,
            "step": self.step,
            "step_ms": _round(self.step_ms),
            "median_ms": _round(self.median_ms),
            "ratio": _round(ratio),
        }
        if self.request is not None:
            out["request"] = self.request
        return out


class CaptureSchedule:
    """The schedule's actions, with captured windows between its own.

    Args:
        base: the configured schedule.
        max_per_hour: anomaly, slowdown and memory growth windows allowed per hour (requests are not counted).
        clock: seconds, for the budget (``time.monotonic``).
    """

    def __init__(self, base: Schedule, max_per_hour: int = 4, clock: Callable[[], float] = time.monotonic) -> None:
        self.base, self.config, self.max_per_hour, self._clock = base, base.config, max_per_hour, clock
        self.plan: Capture | None = None  # the last capture planned (kept after it ends: its export reads it)
        self.pending: collections.deque[tuple[str, str, int | None, int | None]] = collections.deque()  # any thread
        self.wake: Callable[[], None] = _nothing  # the recorder: look at the next step (set by WindowRecorder)
        self.opened: Callable[[Capture], None] = _nothing  # told of each capture planned (the TensorBoard mark)
        self.spent: collections.deque[float] = collections.deque()  # when each budgeted window was planned

    # ---- the Schedule's interface ----------------------------------------------------------------------------------
    def action(self, step: int) -> Action:
        """The action for ``step``: a captured window's, else the schedule's."""
        if self.pending:
            self._serve(step)
        plan = self.plan
        if plan is not None and plan.first <= step <= plan.last:
            return Action.RECORD_AND_SAVE if step == plan.last else Action.RECORD
        return self.base.action(step)

    def next_active(self, step: int) -> float:
        """The first step from ``step`` on that is not NONE, captured windows included."""
        nxt, plan = self.base.next_active(step), self.plan
        if plan is not None and plan.last >= step:
            nxt = min(nxt, max(step, plan.first))
        return nxt

    def window(self, step: int) -> tuple[int, int]:
        """First and last step of the window ``step`` belongs to (a captured one's own)."""
        plan = self.plan
        if plan is not None and plan.first <= step <= plan.last:
            return plan.first, plan.last
        return self.base.window(step)

    def capture_at(self, step: int) -> Capture | None:
        """The capture whose window holds ``step``, if any."""
        plan = self.plan
        return plan if plan is not None and plan.first <= step <= plan.last else None

    # ---- opening windows -------------------------------------------------------------------------------------------
    def request(self, reason: str, request: str, steps: int | None = None, at: int | None = None) -> None:
        """A window at the next step, or at the agreed step ``at``, ``steps`` long. Any thread, or a signal handler.

        ``steps`` defaults to ``schedule.active``; a later ``at`` for the same request moves its window while it has
        not begun (``core/triggers/agreement.py``).
        """
        self.pending.append((reason, request, steps, at))
        self.wake()

    def open(self, capture: Capture) -> bool:
        """Plan ``capture`` if it fits: not over another capture nor a scheduled window, within the budget.

        It is cut short before the next scheduled window's warm-up. True when planned.
        """
        budgeted = capture.reason in ("anomaly", "slowdown", "memory_growth")
        if budgeted and not self._within_budget():
            log.info(
                "perf-callbacks: no window for step %d (%s): %d captured windows in the last hour",
                capture.step,
                capture.reason,
                len(self.spent),
            )
            return False
        plan = self.plan
        if plan is not None and plan.last >= capture.first:
            return False
        nxt = self.base.next_active(capture.first)  # the next scheduled step: one look, whatever the length
        last = capture.last if nxt == math.inf else min(capture.last, int(nxt) - 1)
        if last < capture.first:
            return False
        if last != capture.last:
            capture = Capture(
                capture.reason, capture.step, capture.first, last, capture.step_ms, capture.median_ms, capture.request
            )
        if budgeted:
            self.spent.append(self._clock())
        self.plan = capture
        self.wake()
        self.opened(capture)
        return True

    def _serve(self, step: int) -> None:
        while self.pending:
            reason, request, steps, at = self.pending.popleft()
            n = steps or self.config.active
            if n > MAX_REQUEST_STEPS:
                log.info("perf-callbacks: %s request %s asks for %d steps: capped at %d (MAX_REQUEST_STEPS)", reason,
                         request, n, MAX_REQUEST_STEPS)
                n = MAX_REQUEST_STEPS
            if at is not None:
                self._serve_at(step, reason, request, at, n)
                continue
            if self.base.action(step) is not Action.NONE or self.capture_at(step) is not None:
                log.info("perf-callbacks: %s request at step %d: a window is already recording", reason, step)
                continue
            self.open(Capture(reason, max(step - 1, 0), step, step + n - 1, request=request))

    def _serve_at(self, step: int, reason: str, request: str, at: int, n: int) -> None:
        """A window at the agreed step ``at`` (planned now; moved if the request's window has not begun)."""
        plan = self.plan
        if plan is not None and plan.request == request:
            if plan.first <= step:
                return  # begun (or done): kept, whatever the ranks agree on since
            self.plan = None
        if at < step:
            log.info("perf-callbacks: %s request %s: the ranks agreed on step %d and this rank is at step %d: no "
                     "window on this rank", reason, request, at, step)
            return
        if not self.open(Capture(reason, max(at - 1, 0), at, at + n - 1, request=request)):
            log.info("perf-callbacks: %s request %s: no window at the agreed step %d on this rank (another window "
                     "is planned there)", reason, request, at)

    def _within_budget(self) -> bool:
        now, spent = self._clock(), self.spent
        while spent and now - spent[0] >= HOUR_S:
            spent.popleft()
        return len(spent) < self.max_per_hour


class SpikeLimit:
    """The step time above which a step is an anomaly, refreshed at each logging step; ``inf`` until then.

    Example:
        >>> bar = SpikeLimit()
        >>> bar.refresh([0.10, 0.11, 0.10, 0.09, 0.10, 0.10])  # 2.5 x 0.1 s
        0.25
        >>> bar.refresh([0.01] * 10)  # 10 ms steps: 100 ms above the median
        0.11
        >>> bar.refresh([0.2] * 10, wait_fraction=0.5), bar.own_limit  # half of it waiting for a CPU
        (0.5, 0.25)
        >>> short = SpikeLimit()  # log_every_n_steps 2: the intervals add up until they hold MIN_STEPS steps
        >>> short.refresh([0.1, 0.1]), short.refresh([0.1, 0.1]), short.refresh([0.1, 0.1])
        (inf, inf, 0.25)
    """

    def __init__(self) -> None:
        self.limit = math.inf  # on the elapsed time: what the engine compares each step with
        self.own_limit = math.inf  # on the steps' own time (the median less the interval's waiting share)
        self.median: float | None = None
        self._short: list[float] = []  # the step times of intervals too short to set the bar, until they add up

    def refresh(self, step_times: Sequence[float], wait_fraction: float = 0.0) -> float:
        """The new bar from one interval's measured step times (seconds); the old one when too few were measured.

        Fewer than ``MIN_STEPS`` (``log_every_n_steps`` 1 to 4, or steps left out) are kept and added to the next
        interval's, so that the bar is set at any ``log_every_n_steps``. ``wait_fraction``: the share of the interval
        the thread waited for a CPU; the bar is on the steps' own time.
        """
        if len(step_times) < MIN_STEPS:
            self._short.extend(step_times)
            if len(self._short) < MIN_STEPS:
                return self.limit
            step_times = self._short
        self._short = []
        median = statistics.median(step_times)
        if median <= 0:
            return self.limit
        noise = 1.4826 * statistics.median(abs(t - median) for t in step_times) / median
        k, own = max(K_MIN, 1.0 + NOISE_Z * noise), median * (1.0 - wait_fraction)
        self.median, self.limit = median, round(max(k * median, median + MIN_EXCESS_S), 9)
        self.own_limit = round(max(k * own, own + MIN_EXCESS_S), 9)
        return self.limit


class AnomalyWatch:
    """``capture_on_anomaly``: the engine's bar per step, and the windows it opens.

    Args:
        schedule: the recorder's schedule, where the windows are planned.
        bar: the spike limit (default: a new one).
        sampler: the training thread's wait for a CPU (None: steps are judged on their elapsed time).
    """

    def __init__(
        self, schedule: CaptureSchedule, bar: SpikeLimit | None = None, sampler: WaitSampler | None = None
    ) -> None:
        self.schedule, self.bar, self.sampler = schedule, bar or SpikeLimit(), sampler
        self._slowdown_seen = False

    def spiked(self, step: int, elapsed: float) -> None:
        """Step ``step`` took ``elapsed`` seconds, above the bar: a window from the next step, if it holds."""
        bar = self.bar
        if bar.median is None or elapsed <= bar.limit:
            return
        if self.sampler is not None and self.sampler.own(elapsed) <= bar.own_limit:
            return
        active = self.schedule.config.active
        self.schedule.open(Capture("anomaly", step, step + 1, step + active, elapsed * 1e3, bar.median * 1e3))

    def interval(self, step: int, step_times: Sequence[float], slowdown: Slowdown | None) -> float:
        """A logging interval ended before ``step``: the new bar; a window from ``step`` if the alarm just fired."""
        if slowdown is not None and not self._slowdown_seen:
            self._slowdown_seen = True
            active = self.schedule.config.active
            self.schedule.open(
                Capture("slowdown", slowdown.until_step, step, step + active - 1, slowdown.median, slowdown.baseline)
            )
        return self.bar.refresh(step_times, self.sampler.fraction() if self.sampler is not None else 0.0)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _nothing(*_: Any) -> None:
    return None

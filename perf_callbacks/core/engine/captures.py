"""The engine's captured windows: the anomaly bar, the request sources, and the TensorBoard mark of each capture.

The engine calls :meth:`EngineCaptures.spiked` only for a step above the bar (a comparison on its own hot path),
:meth:`EngineCaptures.interval` at logging steps, :meth:`EngineCaptures.close` at the end. A failure here turns
off only what failed (the anomaly rule, the signal or the request files), with one warning naming it; it never reaches
training.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from functools import partial

from perf_callbacks.analysis.windows.captured import capture_text
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.engine.step_state import StepState
from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.core.timing.stats import Slowdown
from perf_callbacks.core.triggers.agreement import Ranks
from perf_callbacks.core.triggers.captures import AnomalyWatch, Capture, CaptureSchedule
from perf_callbacks.core.triggers.requests import CaptureRequests
from perf_callbacks.core.triggers.wait import WaitSampler
from perf_callbacks.core.warn import WarnFn, quiet
from perf_callbacks.core.windows.recorder import WindowRecorder
from perf_callbacks.exceptions import InstrumentUnavailableWarning

log = logging.getLogger(__name__)
GROWTH_STEPS = 3  # a memory growth window follows 2 steps to the end of its third (analysis/memory/growth.py)


class EngineCaptures:
    """Captured windows of one rank (see ``core/triggers/captures.py`` and ``core/triggers/requests.py``).

    Args:
        config: ``capture_on_anomaly``, ``capture_signal``, ``capture_poll_s``...
        ctx: the run's output folders and where metrics go.
        windows: the recorder, whose schedule plans the windows.
        outputs: the run's writers (the TensorBoard mark goes through ``metrics``).
        warn: the engine's warn-once.
        state: the engine's step state, whose open step the request thread reads (the ranks agree on a request's
            step through the run's folder); None: each request opens at the rank's next step.
    """

    def __init__(
        self, config: PerfConfig, ctx: RunContext, windows: WindowRecorder, outputs: Outputs, warn: WarnFn,
        state: StepState | None = None,
    ) -> None:
        self.ctx, self.outputs, self._warn = ctx, outputs, warn
        self._profile_memory, self._windows_on = config.profile_memory, windows.enabled
        self._schedule = windows.schedule
        self._requests_on = config.capture_poll_s > 0 or bool(config.capture_signal)
        self._step_now = None if state is None else partial(getattr, state, "step")  # read by the request thread
        schedule = windows.schedule
        on = windows.enabled
        self.anomaly = AnomalyWatch(schedule, sampler=WaitSampler()) if on and config.capture_on_anomaly else None
        if self.anomaly is not None and self.anomaly.sampler is not None:
            self.anomaly.sampler.start()
        self.requests: CaptureRequests | None = None
        if ctx.rank == min(config.ranks or [0]):  # the rank whose scalars are logged marks each capture
            schedule.opened = self._mark
        if on and (config.capture_signal or config.capture_poll_s > 0):
            self._source(lambda: self._start(config, windows), "capture_requests",
                         "captures on request are off for this run")

    def _start(self, config: PerfConfig, windows: WindowRecorder) -> None:
        folders = [self.ctx.output_dir, windows.layout.run_dir]
        self.requests = CaptureRequests(
            config.capture_signal,
            config.capture_poll_s,
            folders,
            self.ctx.remote,
            config.storage_options,
            windows.schedule,
            run=windows.layout.run_dir.name,
            rank=self.ctx.rank,
            ranks=None if self._step_now is None else Ranks(self.ctx.world_size, windows.layout.run_dir,
                                                            self._step_now, config.capture_signal_all_ranks),
        )
        self._start_sources(config, self.requests)

    def _start_sources(self, config: PerfConfig, requests: CaptureRequests) -> None:
        """Each source on its own: one that fails is off, with its own warning; the others go on."""
        if requests.signal is not None:
            self._source(requests.signal.install, "capture_signal",
                         f"capture_signal {config.capture_signal} is off for this run (no handler installed)")
        if requests.files is not None:
            self._source(requests.files.start, "capture_poll_s", "request files are off for this run (capture_poll_s)")

    def _source(self, start: Callable[[], object], key: str, what: str) -> None:
        try:
            start()
        except Exception as err:  # noqa: BLE001 - one source that fails leaves the others on
            self._off(key, f"{what}: {type(err).__name__}: {err}")

    def _off(self, key: str, message: str) -> None:
        self._warn(key, InstrumentUnavailableWarning, message, False)

    def replaced_handlers(self) -> dict[int, tuple[object, object]]:
        """``{signum: (our handler, the one it replaced)}`` for the signal handler this engine installed, if any."""
        signal = self.requests.signal if self.requests is not None else None
        if signal is None or signal._handle is None:
            return {}
        return {int(signal.signum): (signal._handle, signal.previous)}

    def spiked(self, step: int, elapsed: float) -> None:
        """A measured step above the bar."""
        if self.anomaly is not None:
            self._guard(lambda: self.anomaly.spiked(step, elapsed) if self.anomaly is not None else None)

    def interval(self, step: int, step_times: Sequence[float], slowdown: Slowdown | None) -> float:
        """A logging step: the new bar (``inf``: none)."""
        anomaly = self.anomaly
        if anomaly is None:
            return math.inf
        limit = self._guard(lambda: anomaly.interval(step, step_times, slowdown))
        return math.inf if limit is None or self.anomaly is None else limit

    def growth_window(self, step: int) -> str:
        """The memory growth warning at the start of ``step``: a window that names the operator; the words that say it.

        A capture (``memory_growth``, budgeted as anomalies are) from the next step when windows record allocations,
        else the next scheduled window's; where none will, the words say so and how to get one.
        """
        what = "the operator that allocates what is kept"
        if not self._windows_on:
            return f"this rank records no profiling windows: nothing names {what}"
        if not self._profile_memory:
            return (f"windows record no allocations (profile_memory=False): rerun with profile_memory=True and a "
                    f"window opened at this warning names {what}")
        schedule = self._schedule
        n = max(schedule.config.active, GROWTH_STEPS)
        if schedule.open(Capture("memory_growth", step, step + 1, step + n)) and schedule.plan is not None:
            return f"steps {schedule.plan.first}-{schedule.plan.last} are profiled now to name {what}"
        nxt = next_window(schedule, step)
        if nxt is not None:
            return f"the profiling window from step {nxt} names {what}"
        how = "`perf-callbacks capture RUN_DIR` opens a window that names it" if self._requests_on else (
            "set capture_poll_s > 0 and `perf-callbacks capture RUN_DIR` opens one")
        return f"no profiling window is left in this run to name {what} (captures spent or one recording): {how}"

    def close(self) -> None:
        """Restore the signal's previous handler, stop looking for request files."""
        if self.requests is not None:
            quiet(self.requests.close)
        sampler = self.anomaly.sampler if self.anomaly is not None else None
        if sampler is not None:
            quiet(sampler.close)

    def _mark(self, capture: Capture) -> None:
        """The capture in TensorBoard (or the run's logger): ``perf/capture`` (its ratio, or 1) and its reason."""
        meta = capture.meta()
        scalars, text = self.ctx.log_summary or self.ctx.log_metrics, self.ctx.log_text
        step = capture.first
        log.info("perf-callbacks: capturing steps %d-%d: %s", capture.first, capture.last, capture_text(meta))
        if scalars is not None:
            self.outputs.call("metrics", lambda: scalars({"perf/capture": float(meta["ratio"] or 1.0)}, step))
        if text is not None:
            self.outputs.call("metrics", lambda: text("perf/capture", capture_text(meta), step))

    def _guard(self, fn: Callable[[], float | None]) -> float | None:
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - instrumentation must never break training
            self.anomaly = None
            self._off("capture", f"capture_on_anomaly is off for this run: {type(err).__name__}: {err}")
            return None


def next_window(schedule: CaptureSchedule, step: int) -> int | None:
    """The first step of the next window whose profiler starts after ``step`` (None: none is left).

    A window already recording at ``step + 1`` (begun with its warm-up, or a capture) is not one: its trace's metadata
    was written when it began.
    """
    at = schedule.next_active(step + 1)
    for _ in range(2):
        if at == math.inf:
            return None
        first, last = schedule.window(int(at))
        begins = first if schedule.capture_at(int(at)) is not None else first - schedule.config.warmup
        if begins > step:
            return first
        at = schedule.next_active(last + 1)
    return None

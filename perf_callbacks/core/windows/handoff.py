"""A window's end, handed over to its background job, and what comes back from the job.

A part of :class:`~perf_callbacks.core.windows.recorder.WindowRecorder` (its ``handoff``). Once the session stops,
the window's trace is exported under the steps it really holds (cut before a step that never completed; not written at
all above ``max_trace_mb``, which the user is told once), and goes with the metadata its sidecar keeps (steps, planned,
partial, interrupted, the loop's stall) to a :class:`~perf_callbacks.core.windows.background.WindowJob`. Finished jobs
are polled from the training loop: their traces are logged, their summaries printed and logged, their folders uploaded
to a remote ``output_dir``; at the run's end the recorder waits for them, a bounded time, rebuilds the run's page once
more (other ranks may have finished since), and says what it did not wait for, or why no window was recorded at all.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.clock import StepClock
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.core.files.remote import FINISH_WAIT_S, Uploads
from perf_callbacks.core.files.traces import TraceLayout, TraceTooLargeError, export_raw, size_text
from perf_callbacks.core.memory.watch import MemoryWatch
from perf_callbacks.core.triggers.captures import CaptureSchedule
from perf_callbacks.core.warn import WarnFn, quiet
from perf_callbacks.core.windows.background import PageJob, WindowJob
from perf_callbacks.core.windows.profiler import ProfilerSession
from perf_callbacks.core.windows.summary import publish_summary, window_header, window_line
from perf_callbacks.core.windows.trace_cut import cut_at_step
from perf_callbacks.exceptions import TraceSizeWarning

PAGE_WAIT_S = 5.0
"""How long the run's end waits for the last rebuild of the run's page (a few JSON reads per window)."""
log = logging.getLogger("perf_callbacks.core.windows.recorder")  # the recorder's, where "trace written" always was


class WindowHandoff:
    """The recorder's window ends: the export, the background jobs, and what they report.

    Args:
        config: the validated configuration.
        ctx: the run's context.
        warn: ``warn(key, category, message, main_only)``, the engine's warn-once.
        outputs: the run's writers.
        schedule: the recorder's schedule (the window each step was planned in, and why it was captured).
        layout: where the run's windows go.
        clock: the engine's step clock (whether the loop's data wait was measured).
        mem: the engine's memory watch (the allocator snapshot next to the traces), None without one.
        is_reporter: this rank prints and logs the windows' summaries.
        fail: what disables the recorder, called with a job's error.
    """

    def __init__(self, config: PerfConfig, ctx: RunContext, warn: WarnFn, outputs: Outputs, *,
                 schedule: CaptureSchedule, layout: TraceLayout, clock: StepClock, mem: MemoryWatch | None,
                 is_reporter: bool, fail: Callable[[BaseException], None]) -> None:
        self.config, self.ctx, self._warn, self.outputs = config, ctx, warn, outputs
        self.schedule, self.layout, self.clock, self.mem = schedule, layout, clock, mem
        self.is_reporter, self._fail = is_reporter, fail
        self.exported: list[Path] = []  # traces written (their jobs finished)
        self.summaries: list[str] = []
        self.jobs: list[WindowJob] = []  # handed over, not reported yet
        self.too_large: list[str] = []  # the steps of each window recorded, then dropped for its size
        self.uploads = Uploads(ctx.remote, ctx.output_dir, config.storage_options, outputs) if ctx.remote else None
        # the run's ledger so far, at a window's finish (the engine's ``ledger_stamps.so_far``): into its sidecar
        self.ledger_so_far: Callable[[float], dict[str, Any] | None] | None = None

    def export(self, session: ProfilerSession, error: BaseException | None, steps: list[int], *, completed: int,
               retracted: int | None, compile_s: float, t_finish: float, analyse: bool) -> None:
        """Export the stopped session's trace and hand it to a background job (or drop it, too large).

        Args:
            session: the stopped session.
            error: what interrupted the window, None when it ended as planned.
            steps: the steps recorded in the window.
            completed: how many of them finished their optimizer step.
            retracted: a step begun in the window that never completed (cut from the trace), else None.
            compile_s: torch.compile's seconds in the window's steps.
            t_finish: ``time.perf_counter()`` when the window began to finish (the loop's stall is counted from it).
            analyse: the recorder is on: the job may write the window's sidecar and summary.
        """
        first, last = steps[0], steps[-1]
        wdir, tidy = self.layout.window_dir(first, last), self.ctx.world_size == 1  # tidy: the run folder is ours alone
        try:
            raw = export_raw(session.export, wdir, self.ctx.rank, self.config.max_trace_mb, tidy)
            if retracted is not None:
                quiet(lambda: cut_at_step(raw, retracted))  # at worst, the trace keeps that step
        except TraceTooLargeError as err:
            self._warn("max_trace_mb", TraceSizeWarning, (
                f"the trace of steps {first}-{last} on rank {self.ctx.rank} is {size_text(err.size_mb)}, above "
                f"max_trace_mb={self.config.max_trace_mb:g}; it was not written. Lower schedule.active, turn off "
                "with_stack/record_shapes/profile_memory, or raise max_trace_mb"), False)
            self.too_large.append(f"{first}-{last}")
            return
        if self.mem is not None and self.mem.oom.recording:  # the allocator snapshot next to the traces
            self.mem.oom.window_snapshot(wdir)
        planned = self.schedule.window(first)
        partial = error is not None or first > planned[0] or last < planned[1] or completed < len(steps)
        meta = {"window": [first, last], "planned": list(planned), "steps": list(steps), "partial": partial,
                "interrupted": type(error).__name__ if error is not None else None, "rank": self.ctx.rank}
        if not self.clock.loader_timed:
            meta["data_wait"] = "not measured"
        if (capture := self.schedule.capture_at(first)) is not None:
            meta["capture"] = capture.meta()
        if self.mem is not None and self.mem.headline():
            meta["phase_peak"] = self.mem.headline()
        if compile_s:
            meta["compile_s"] = round(compile_s, 3)
        so_far = self.ledger_so_far
        if so_far is not None and (stamps := quiet(lambda: so_far(t_finish))) is not None:
            meta["ledger_so_far"] = stamps  # the sidecar's ``ledger``, taken out of its meta
        meta["stall_ms"] = round((time.perf_counter() - t_finish) * 1e3, 2)  # up to handing over to the job
        header = window_header(meta, self.ctx.rank, completed) if self.is_reporter else None
        analyse = self.config.summary and analyse and self.outputs.enabled("sidecars")
        job = WindowJob(raw, self.layout.trace_path(wdir, self.ctx.rank), meta, analyse, header, self.config.top_k)
        job.write_summary, job.tidy = self.outputs.enabled("summaries"), tidy
        job.write_page = self.outputs.enabled("pages")
        job.rephrase = self.ctx.rephrase  # "dataloader_num_workers" under transformers
        job.shown = self.uploads.shown if self.uploads is not None else str
        job.start()
        self.jobs.append(job)

    # ---- background jobs ------------------------------------------------------------------------------------------
    def poll(self) -> None:
        """Report the jobs that finished (cheap: a liveness check per pending job), and a failed upload."""
        for job in [j for j in self.jobs if not j.is_alive()]:
            self.jobs.remove(job)
            self._report(job)
            if self.uploads is not None:  # its files are finished: on to the remote output_dir
                self.uploads.submit(job.dest.parent)
        if self.uploads is not None:
            self.uploads.report()

    def wait(self, timeout_s: float, last_page: bool = False) -> None:
        """Join pending jobs for up to ``timeout_s`` in all, then report them; a job still running is left to finish.

        With ``last_page`` (the run's end), the reporting rank then rebuilds the run's page once more (see
        :meth:`_last_page`).
        """
        deadline = time.monotonic() + timeout_s
        try:
            for job in list(self.jobs):
                job.join(max(deadline - time.monotonic(), 0.0))
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, the job still writes its files
            pass
        self.poll()
        for job in self.jobs:
            print(f"perf-callbacks: the summary of {job.dest.parent} is still being written in the background",
                  file=sys.stderr, flush=True)
        if last_page:
            self._last_page()
        if self.uploads is not None:  # the rest of the run folder (events, OOM evidence), with a bounded wait
            self.uploads.finish(FINISH_WAIT_S)

    def _last_page(self) -> None:
        """Rebuild ``report.html`` with the sidecars other ranks wrote after this rank's last window summary.

        Only where the window jobs wrote it: the reporting rank, pages still on, a window summarised, none still
        pending (that job writes the page itself), a local ``output_dir`` (staged window folders are uploaded and
        removed). It runs on the jobs' worker thread, waited for ``PAGE_WAIT_S`` at most; a failure turns pages off.
        """
        if not (self.is_reporter and self.summaries and self.exported) or self.jobs or self.uploads is not None:
            return
        if not self.outputs.enabled("pages"):
            return
        job = PageJob(self.exported[-1].parent.parent)
        job.start()
        try:
            done = job.finished.wait(PAGE_WAIT_S)
        except KeyboardInterrupt:  # a second Ctrl-C: the page is written atomically, or not at all
            done = False
        for writer, cause, path in job.failures if done else []:
            self.outputs.failed(writer, cause, path)

    def _report(self, job: WindowJob) -> None:
        for writer, cause, path in job.failures:  # a sidecar or summary.txt it could not write
            self.outputs.failed(writer, cause, path)
        if job.error is not None:
            self._fail(job.error)
            return
        if job.trace is not None:
            self.exported.append(job.trace)
            if self.uploads is None:
                log.info("perf-callbacks: trace written to %s", job.trace)
            else:  # its upload is not confirmed yet: say both
                log.info("perf-callbacks: trace written to %s (staged; uploading to %s)", job.trace,
                         self.uploads.url_of(job.trace))
        if job.summary is None:
            return
        self.summaries.append(job.summary)
        line = None if self.config.verbose else window_line(job.console, job.meta, job.dest.parent)
        if line is not None and self.uploads is not None:
            line = self.uploads.shown(line)
        publish_summary(self.ctx, job.summary, job.scalars, int(job.meta["window"][1]), self.outputs, line)

    def nothing_recorded_line(self, steps_run: int) -> str:
        """The one line that says so, with where the first window would have started."""
        if self.too_large:  # recorded, then dropped: the schedule is not what to change
            one = len(self.too_large) == 1
            return (f"perf-callbacks: no trace was written: {'the' if one else len(self.too_large)} profiling "
                    f"window{'' if one else 's'} (steps {', '.join(self.too_large)}) {'was' if one else 'were'} "
                    f"recorded, but {'its trace was' if one else 'each trace was'} above max_trace_mb="
                    f"{self.config.max_trace_mb:g} and dropped. Raise max_trace_mb, or make the trace smaller: lower "
                    "schedule.active, turn off with_stack/record_shapes/profile_memory.")
        s = self.config.schedule
        first = s.skip_first + s.wait + s.warmup
        return (f"perf-callbacks: no profiling window was recorded: {steps_run} optimizer steps ran, and the first "
                f"window starts at step {first} (schedule: skip_first={s.skip_first}, wait={s.wait}, "
                f"warmup={s.warmup}). Lower schedule.skip_first to profile a shorter run.")

    @property
    def busy(self) -> bool:
        """A background job is pending, or an upload failed (the engine polls only then)."""
        return bool(self.jobs) or (self.uploads is not None and self.uploads.news)

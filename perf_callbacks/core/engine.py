"""The engine: one training run on one rank, driven by four calls per micro-batch.

An adapter (Lightning, Accelerate) maps its framework's hooks onto::

    batch_start(step)        # step = optimizer steps completed so far (Lightning's trainer.global_step)
    phase("backward") ...    # optional phase ranges: forward, backward, optimizer_step
    batch_end(stepped)       # stepped: this micro-batch finished an optimizer step
    close(exc)               # end of training, or an exception (then the partial trace is flushed)

A step is "opened" when the previous one closes (or at the first batch), so its NVTX range and its
``ProfilerStep#N`` span include the data wait before it, as in a plain ``for batch in loader: ...; prof.step()`` loop.
Outside profiling windows a micro-batch costs a few ``perf_counter`` reads, integer compares and cached NVTX
push/pops; memory is read only at logging steps and nothing synchronises with the device.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.dataloader import Finding, data_wait_finding
from perf_callbacks.core.memory import MemorySampler
from perf_callbacks.core.module_ranges import ModuleRanges
from perf_callbacks.core.nsys import NsysCapture
from perf_callbacks.core.nvtx import NvtxRanges
from perf_callbacks.core.oom import OOMForensics, batch_from_traceback  # issue 15
from perf_callbacks.core.phase_peaks import FIRST_STEP, PhasePeaks  # issue 15
from perf_callbacks.core.profiler import ProfilerSession, foreign_profiler_running
from perf_callbacks.core.schedule import Action, Schedule
from perf_callbacks.core.stats import DataWaitCheck, DegradationDetector, StepStats
from perf_callbacks.core.summary import WindowReporter
from perf_callbacks.core.traces import TraceLayout, compress_trace
from perf_callbacks.exceptions import (
    DataLoaderWarning,
    InstrumentUnavailableWarning,
    PerformanceDegradationWarning,
    PerfWarning,
    ShardingWarning,
    TraceSizeWarning,
)

log = logging.getLogger(__name__)

MetricsFn = Callable[[dict[str, float], int], None]
TextFn = Callable[[str, str, int], None]


@dataclass
class RunContext:
    """What the adapter knows about the run.

    Args:
        output_dir: resolved output directory.
        run_name: the same on every rank of this run (see ``traces.new_run_name``).
        rank: global rank.
        world_size: number of ranks.
        device: this rank's device (CUDA device, or None/CPU).
        log_every_n_steps: memory and timing log interval, in optimizer steps.
        log_metrics: receives ``{"perf/...": value}`` and the step; None disables metric logging.
        log_text: receives (tag, text, step) for the window summary; optional.
        log_summary: receives the window summary's scalars on the reporting rank alone; default ``log_metrics``
            (an adapter whose ``log_metrics`` is a cross-rank collective must give a local one here).
        data_loader: name and num_workers of the training loader, quoted by the data-wait warning.
    """

    output_dir: Path
    run_name: str
    rank: int = 0
    world_size: int = 1
    device: torch.device | None = None
    log_every_n_steps: int = 50
    log_metrics: MetricsFn | None = None
    log_text: TextFn | None = None
    log_summary: MetricsFn | None = None
    data_loader: tuple[str, int | None] = ("train_dataloader", None)
    distributed_initialized: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class PerfEngine:
    """Composes schedule, profiler, NVTX, memory sampling, step statistics and trace files.

    Args:
        config: the validated configuration.
        ctx: the run's context, filled in by the adapter.
    """

    def __init__(self, config: PerfConfig, ctx: RunContext) -> None:
        self.config, self.ctx = config, ctx
        self.is_main = ctx.rank == 0
        self.schedule = Schedule(config.schedule)
        self.layout = TraceLayout(ctx.output_dir, ctx.run_name)
        self.nvtx = NvtxRanges(config.nvtx_domain, enabled=config.nvtx)
        self._nvtx_on = self.nvtx.enabled  # no tool attached (the usual case): skip the calls on the hot path
        self.cuda = ctx.device is not None and ctx.device.type == "cuda"
        self.memory = MemorySampler(ctx.device, nvml=config.nvml) if config.memory else None
        self.stats = StepStats()
        self.degradation = DegradationDetector(config.degradation_threshold)
        self.data_wait_check = DataWaitCheck(config.data_wait_steps, config.data_wait_threshold)
        traced = config.ranks is None or ctx.rank in config.ranks
        self.profiling = traced
        self.reporter = WindowReporter(config, ctx, is_reporter=traced and ctx.rank == min(config.ranks or [0]))
        self.nsys = NsysCapture(config.nsys_capture, set(config.ranks) if config.ranks else None, ctx.rank)
        self.module_ranges = ModuleRanges(self.nvtx) if config.nvtx_modules else None
        self.model: torch.nn.Module | None = None
        self.session: ProfilerSession | None = None
        self.window: tuple[int, int] | None = None
        self.exported: list[Path] = []
        self._warned: set[str] = set()
        self._open: int | None = None
        self._in_window = False
        self._t_open = 0.0
        self._t_last_end: float | None = None
        self._wait = 0.0
        self._aside = 0.0  # time of the open step spent outside training: validation, checkpoint saves
        self._t_val = 0.0
        self._t_ckpt = 0.0
        self._ckpt_rf: Any = None
        self._phase: str | None = None
        self._phase_rf: Any = None
        self._window_times: list[float] = []
        self._window_wait = 0.0
        self._closed = False
        self._wait_measured = False
        self._init_memory_forensics()  # issue 15

    def _init_memory_forensics(self) -> None:  # issue 15: OOM evidence, allocator history, per-phase peaks
        cfg = self.config
        self.peaks = PhasePeaks.for_device(self.ctx.device) if cfg.memory else None
        self.oom = OOMForensics(cfg.memory_history, self.ctx.rank, self.layout.run_dir, self.ctx.device, self.peaks,
                                cfg.memory_history_start)
        self._failed_at: tuple[BaseException, int | None, str] | None = None
        if self.peaks is not None:  # the first step is measured; later ones after each logging step
            self._arm_peaks(FIRST_STEP)
        if self.oom.wants_step_hook:  # only then does a step start look at memory_history_start
            self._open_step = self._open_step_history  # type: ignore[method-assign]
        if cfg.memory_history and not self.cuda:
            self._warn("memory_history", InstrumentUnavailableWarning,
                       f"memory_history={cfg.memory_history} records the CUDA caching allocator; this run has no CUDA "
                       "device, so no snapshot.pickle is written (out-of-memory summaries still are)")

    def attach_model(self, model: torch.nn.Module) -> None:
        """The model that gets per-module NVTX ranges inside windows (``nvtx_modules``)."""
        self.model = model

    # ---- hot path: once per micro-batch ---------------------------------------------------------------------
    def batch_start(self, step: int) -> None:
        """A micro-batch of optimizer step ``step`` starts; closes the data wait that preceded it."""
        t = time.perf_counter()
        if self._t_last_end is not None:
            self._wait += t - self._t_last_end
            self._t_last_end = None
        if self._open != step:
            if self._open is not None:  # steps skipped (e.g. a resumed run): drop the stale step
                self._abandon_step()
            self._open_step(step, t)
        self.phase("forward")

    def batch_end(self, stepped: bool, samples: int | None = None) -> None:
        """A micro-batch ended; ``stepped`` is True when it completed an optimizer step."""
        t = time.perf_counter()
        self.end_phase()
        if stepped and self._open is not None:
            step = self._open
            self._close_step(step, t, samples)
            self._open_step(step + 1, t)
        self._t_last_end = t
        self.phase("data_wait")

    def phase(self, name: str) -> None:
        """End the current phase range and open ``name`` (NVTX always; ``record_function`` inside windows)."""
        if self._phase is not None:
            self.end_phase()
        self._phase = name
        if self._nvtx_on:
            self.nvtx.push(name)
        if self._in_window:
            self._phase_rf = _enter_record_function(f"perf_callbacks.{name}")

    def _phase_peaks(self, name: str) -> None:  # issue 15: phase() of the measured step only, see _arm_peaks
        self._guard("metrics", self._peaks_boundary, name)
        PerfEngine.phase(self, name)

    def _peaks_boundary(self, name: str) -> None:  # issue 15
        if self.peaks is None or self.peaks.boundary(name, self._open):
            vars(self).pop("phase", None)  # the measured step is over: back to the plain phase()

    def _arm_peaks(self, step: int) -> None:  # issue 15: per-phase peaks cost nothing on the other steps
        if self.peaks is not None:
            self.peaks.arm(step)
            self.phase = self._phase_peaks  # type: ignore[method-assign]

    def note_failure(self, exc: BaseException, phase: str | None = None) -> None:  # issue 15
        """An exception leaves ``phase`` (default: the open one) before :meth:`close` runs: remember where it was."""
        if self._failed_at is None or self._failed_at[0] is not exc:
            self._failed_at = (exc, self._open, phase or self._phase or "unknown")

    def end_phase(self) -> None:
        """Close the current phase range, if any."""
        if self._phase is None:
            return
        self._phase = None
        if self._nvtx_on:
            self.nvtx.pop()
        if self._phase_rf is not None:
            rf, self._phase_rf = self._phase_rf, None
            rf.__exit__(None, None, None)

    def validation_start(self) -> None:
        """Validation inside training: its own range, and its time is left out of step time and data wait."""
        self._t_val = time.perf_counter()
        self.phase("validation")

    def validation_end(self) -> None:
        """Validation finished; the data wait of the next step starts now."""
        t = time.perf_counter()
        if self._open is not None:
            self._aside += t - self._t_val
        self.end_phase()
        self._t_last_end = t
        self.phase("data_wait")

    def checkpoint_start(self) -> None:
        """A checkpoint save begins: a range nested in the current phase; its time is left out of step and wait."""
        self._t_ckpt = time.perf_counter()
        if self._nvtx_on:
            self.nvtx.push("checkpoint")
        if self._in_window:
            self._ckpt_rf = _enter_record_function("perf_callbacks.checkpoint")

    def checkpoint_end(self) -> None:
        """The checkpoint save finished (or raised)."""
        spent = time.perf_counter() - self._t_ckpt
        if self._ckpt_rf is not None:
            rf, self._ckpt_rf = self._ckpt_rf, None
            rf.__exit__(None, None, None)
        if self._nvtx_on:
            self.nvtx.pop()
        if self._phase == "validation":  # already left out as validation time
            return
        if self._open is not None:
            self._aside += spent
        if self._t_last_end is not None:
            self._t_last_end += spent

    # ---- once per optimizer step -------------------------------------------------------------------------------
    def _open_step_history(self, step: int, t: float) -> None:  # issue 15: installed only for memory_history_start
        if step >= (self.config.memory_history_start or 0):
            vars(self).pop("_open_step", None)
            self._guard("memory_history", self.oom.start_history, step)
        PerfEngine._open_step(self, step, t)

    def _open_step(self, step: int, t: float) -> None:
        self._open, self._t_open, self._wait, self._aside = step, t, 0.0, 0.0
        self.nvtx.push_step(step)
        if self.config.nsys_steps is not None and step == self.config.nsys_steps[0]:
            self.nsys.start(step)
        action = self.schedule.action(step) if self.profiling else Action.NONE
        self._in_window = action is not Action.NONE
        if self._in_window:
            self._guard("profiler", self._profiler_enter, step, action)

    def _close_step(self, step: int, t: float, samples: int | None) -> None:
        step_time = max(t - self._t_open - self._aside, 0.0)
        self.nvtx.pop()
        if self._in_window:
            if self.session is not None and self.session.recording:
                self._window_times.append(step_time)
                self._window_wait += self._wait
        elif self._wait_measured:  # the run's first step has no preceding batch end to measure its data wait from
            self.stats.update(step_time, self._wait, samples)
            share = self.data_wait_check.update(step, step_time, self._wait)
            if share is not None:
                self._warn_data_wait(share, step)
        self._wait_measured = True
        if self.config.nsys_steps is not None and step == self.config.nsys_steps[1]:
            self.nsys.stop(step)
        if (step + 1) % self.ctx.log_every_n_steps == 0:
            self._guard("metrics", self._log_interval, step + 1)
        if self.session is not None and self.schedule.action(step) is Action.RECORD_AND_SAVE:
            self._guard("profiler", self._finish_window, None)
        self._open, self._in_window = None, False

    def _abandon_step(self) -> None:
        self.end_phase()
        self.nvtx.pop()
        if self.session is not None:
            self._guard("profiler", self._finish_window, None)
        self._open, self._in_window = None, False

    # ---- profiler windows ----------------------------------------------------------------------------------------
    def _profiler_enter(self, step: int, action: Action) -> None:
        if self.session is None:
            if foreign_profiler_running():
                self._disable(
                    "profiler",
                    "another torch.profiler/autograd profiler is already running; perf-callbacks stands aside and "
                    "records no trace (stop your own profiler, or remove the callback)",
                )
                return
            self.window = self.schedule.window(step)
            self._window_times, self._window_wait = [], 0.0
            self.session = ProfilerSession(self.config, self.cuda, self._distributed_info())
            self._guard("memory_history", self.oom.window_started, step)  # issue 15
        if action is Action.WARMUP:
            self.session.prepare()
        elif not self.session.recording:
            self.session.start()
            self._window_instruments_on(step)
        self.session.mark_step(step)

    def _window_instruments_on(self, step: int) -> None:
        if self.config.nsys_steps is None:
            self.nsys.start(step)
        if self.module_ranges is not None and self.model is not None:
            self.module_ranges.install(self.model)

    def _window_instruments_off(self, step: int) -> None:
        if self.config.nsys_steps is None:
            self.nsys.stop(step)
        if self.module_ranges is not None:
            self.module_ranges.remove()

    def _finish_window(self, error: BaseException | None) -> None:
        session, window = self.session, self.window
        self.session = None
        if session is None or window is None:
            return
        recorded = session.recording
        self._window_instruments_off(window[1])
        session.stop()
        if not recorded:
            return
        path = self._export(session, window)
        if self.oom.recording:  # issue 15: the allocator snapshot next to the traces
            self._guard("memory_history", self.oom.window_snapshot, self.layout.window_dir(*window))
        if path is not None:
            peaks = self.peaks.headline() if self.peaks is not None else None  # issue 15
            self.reporter.report(path, window, self._window_times, self._window_wait, error, self.memory, peaks)

    def _export(self, session: ProfilerSession, window: tuple[int, int]) -> Path | None:
        wdir = self.layout.window_dir(*window)
        wdir.mkdir(parents=True, exist_ok=True)
        raw = self.layout.raw_path(wdir, self.ctx.rank)
        try:
            t0 = time.perf_counter()
            session.export(raw)
            size_mb = raw.stat().st_size / 1e6
            if size_mb > self.config.max_trace_mb:
                self._warn(
                    "max_trace_mb",
                    TraceSizeWarning,
                    f"the trace of steps {window[0]}-{window[1]} on rank {self.ctx.rank} is {size_mb:.0f} MB, above "
                    f"max_trace_mb={self.config.max_trace_mb:g}; it was not written. Lower schedule.active, turn off "
                    "with_stack/record_shapes/profile_memory, or raise max_trace_mb",
                    main_only=False,
                )
                return None
            dist = None if self.ctx.distributed_initialized else self._distributed_info()
            path = compress_trace(raw, self.layout.trace_path(wdir, self.ctx.rank), dist)
            log.info("trace written to %s (%.1f MB raw, %.2f s)", path, size_mb, time.perf_counter() - t0)
            self.exported.append(path)
            return path
        finally:
            raw.unlink(missing_ok=True)

    def _distributed_info(self) -> dict[str, Any] | None:
        if self.ctx.distributed_initialized:
            return None
        return {"backend": "", "rank": self.ctx.rank, "world_size": self.ctx.world_size}

    # ---- logging and checks ------------------------------------------------------------------------------------
    def _log_interval(self, step: int) -> None:
        metrics = self.stats.compute()
        self.stats.reset()
        if self.memory is not None:
            metrics.update(self.memory.sample())
            if self.peaks is not None:  # issue 15: last measured step's phase peaks; measure the next step
                metrics.update(self.peaks.metrics(metrics))
                self._arm_peaks(step)
        median = metrics.get("train/step_time_ms")
        if median is not None:
            ratio = self.degradation.check(median)
            if ratio is not None:
                self._warn(
                    "degradation",
                    PerformanceDegradationWarning,
                    f"median step time {median:.1f} ms over the {self.ctx.log_every_n_steps} steps before step "
                    f"{step} is {ratio - 1:.0%} above this run's early baseline ({self.degradation.baseline:.1f} ms); "
                    "look for memory fragmentation (reserved >> allocated), a growing Python-side cache, or thermal "
                    "throttling",
                )
        if self.ctx.log_metrics is not None and metrics:
            self.ctx.log_metrics({f"perf/{k}": v for k, v in metrics.items()}, step)

    def _warn_data_wait(self, share: float, step: int) -> None:
        name, workers = self.ctx.data_loader
        first = self.data_wait_check.first_step or 0
        self._warn("data_wait", DataLoaderWarning, data_wait_finding(name, share, first, step, workers).message)

    def report_findings(self, findings: list[Finding]) -> None:
        """Warn once (rank 0) for each DataLoader finding."""
        for f in findings:
            category = ShardingWarning if f.code in ("not_sharded", "double_sharded") else DataLoaderWarning
            self._warn(f"{f.code}:{f.loader}", category, f.message)

    def _warn(self, key: str, category: type[PerfWarning], message: str, main_only: bool = True) -> None:
        if key in self._warned or (main_only and not self.is_main):
            return
        self._warned.add(key)
        warnings.warn(message, category, stacklevel=4)

    def _disable(self, instrument: str, reason: str) -> None:
        if instrument == "profiler":
            self.profiling = False
            self.session = None
            self._in_window = False
        elif instrument == "metrics":
            self.memory = None
            self.peaks = None  # issue 15
        rank = f" on rank {self.ctx.rank}" if self.ctx.world_size > 1 else ""
        self._warn(f"disabled:{instrument}", InstrumentUnavailableWarning, f"{instrument} disabled{rank}: {reason}",
                   main_only=False)

    def _guard(self, instrument: str, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - instrumentation must never break training
            if instrument == "profiler" and self.session is not None:
                session, self.session = self.session, None
                if self.module_ranges is not None:
                    _quiet(self.module_ranges.remove)
                _quiet(session.stop)
            self._disable(instrument, f"{type(err).__name__}: {err}; training continues")

    # ---- end of training ---------------------------------------------------------------------------------------
    def close(self, exc: BaseException | None = None, batch: Any = None) -> None:
        """Stop everything and flush: the partial trace of an interrupted window is exported. Never raises.

        On ``torch.OutOfMemoryError`` the rank's ``oom-rank{R}/`` evidence is written first (``batch``: the failing
        batch if the adapter knows it, else the innermost ``batch`` local of the traceback).
        """
        if self._closed:
            return
        self._closed = True
        if isinstance(exc, torch.OutOfMemoryError):  # issue 15: before the phases are closed below
            failed = self._failed_at
            step, phase = (failed[1], failed[2]) if failed and failed[0] is exc else (self._open, self._phase)
            self.oom.on_oom(exc, step, phase, batch if batch is not None else batch_from_traceback(exc))
        _quiet(self.end_phase)
        if self.module_ranges is not None:
            _quiet(self.module_ranges.remove)
        _quiet(self.nsys.close)
        _quiet(self.nvtx.pop_all)
        if self.session is not None:
            self._guard("profiler", self._finish_window, exc)
        _quiet(self.oom.stop_history)  # issue 15
        self._open, self._in_window = None, False


# Phase spans inside windows: torch's fast record function costs about 0.2-0.8 us an enter/exit pair against 6-8 us
# for ``record_function``. Its events come out as ``cpu_op``; the analysis reads ``perf_callbacks.*`` ones as
# annotations. ``ProfilerStep#N`` keeps ``record_function``: other tools expect it as a user annotation.
_FastRecordFunction: Any = getattr(torch._C._profiler, "_RecordFunctionFast", None)


def _enter_record_function(name: str) -> Any:
    rf = _FastRecordFunction(name) if _FastRecordFunction is not None else torch.profiler.record_function(name)
    rf.__enter__()
    return rf


def _quiet(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001
        log.debug("ignored error during close", exc_info=True)

"""Lightning adapter: ``Trainer(callbacks=[GPUPerfCallback()])``. It maps Trainer hooks onto the engine, nothing else.

Example:
    >>> import lightning as L
    >>> from perf_callbacks import GPUPerfCallback
    >>> cb = GPUPerfCallback(schedule={"skip_first": 5, "active": 2})
    >>> trainer = L.Trainer(callbacks=[cb], max_steps=1, logger=False, enable_progress_bar=False)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import PyTorchProfiler
from typing_extensions import override

from perf_callbacks.config import PerfConfig, check_ranks
from perf_callbacks.core.engine.engine import PerfEngine, RunContext, now
from perf_callbacks.core.engine.phases import PhaseRanges
from perf_callbacks.core.files.remote import resolve_output
from perf_callbacks.core.files.traces import new_run_name
from perf_callbacks.core.flops.peak import mixed_precision_dtype
from perf_callbacks.core.warn import warn_user
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from perf_callbacks.integrations._adapters import batch_size, distributed_initialized
from perf_callbacks.integrations._cli_errors import config_or_exit
from perf_callbacks.integrations._lightning.loaders import check_train_loaders
from perf_callbacks.integrations._lightning.loggers import default_output_dir, metrics_sink, text_sink
from perf_callbacks.integrations._lightning.wrappers import (
    undo_failed_fit,
    unwrap_fetch,
    unwrap_save_checkpoint,
    wrap_fetch,
    wrap_save_checkpoint,
)

CHECKPOINT_KEY = "perf_callbacks"


class GPUPerfCallback(Callback):
    """Profiler windows by optimizer step, NVTX ranges, memory/timing logs, DataLoader checks and a verdict.

    Every argument is a :class:`~perf_callbacks.PerfConfig` key (see its docstring); ``schedule`` is a mapping with
    ``wait``, ``warmup``, ``active``, ``repeat`` and ``skip_first``. Bad values raise ``PerfConfigError`` here, at
    construction. The same keys work from LightningCLI YAML (``trainer.callbacks``) and from :meth:`from_yaml`.

    Args:
        output_dir: default ``<trainer.log_dir>/perf``, else ``<default_root_dir>/perf``; an fsspec URL
            (``s3://bucket/perf``) is staged on local disk and uploaded in the background.
        schedule: profiler schedule by optimizer step (``trainer.global_step``).
        activities: ``cpu`` and/or ``cuda``; default CPU plus CUDA when available.
        record_shapes: record operator input shapes.
        profile_memory: record allocations inside windows.
        with_stack: record Python stacks inside windows.
        with_flops: estimate FLOPs.
        ranks: global ranks that profile; default all.
        max_trace_mb: cap on one rank's uncompressed window trace.
        nvtx: emit NVTX step and phase ranges.
        nvtx_domain: NVTX domain name.
        nvtx_modules: per-module NVTX ranges inside windows.
        module_spans: per-module spans in the trace (and NVTX) inside windows: time, FLOPs, parameters by module.
        nsys_capture: cudaProfilerStart/Stop around the window for ``nsys --capture-range=cudaProfilerApi``.
        nsys_steps: ``[first, last]`` steps for the Nsight capture instead of the profiler window.
        log_every_n_steps: default ``trainer.log_every_n_steps``.
        log_min_interval_s: least seconds between logged intervals (fast loops: a multiple of the steps); 0: none.
        memory: log allocated/reserved/peak memory (host RSS on CPU).
        nvml: log GPU utilization and power via NVML when available.
        degradation_threshold: slowdown over the early baseline that triggers a warning.
        data_wait_threshold: data-wait share of step time that triggers a warning.
        data_wait_steps: steps measured for the data-wait check.
        check_dataloaders: inspect the train DataLoader when training starts.
        summary: print and save a summary at the end of each window (rank 0).
        verbose: print the whole summary on the console, not one line per window.
        top_k: operators in the summary.
        flops: count one step's FLOPs when neither ``flops_per_step`` nor the module's ``flops_per_batch`` gives them.
        flops_per_step: model FLOPs of one optimizer step on one device (the base of TFLOP/s and MFU).
        peak_tflops: the device's peak TFLOP/s for the compute dtype; default Lightning's ``get_available_flops``.
        peak_tbps: the device's peak memory bandwidth in TB/s for the roofline; default NVML, else a known-device table.
        memory_history: allocator-history entries recorded for ``snapshot.pickle`` (0: off; CUDA only).
        memory_history_start: step at which that recording starts; default the first profiling window.
        storage_options: fsspec options for a remote ``output_dir`` (endpoint, credentials).
        hang_timeout: seconds with no completed step before ``hang-rank{R}/``; default max(300, 20 x median); 0: off.
        capture_on_anomaly: a window after a step k times the median, or the slowdown alarm (capture_max_per_hour).
        capture_signal: the signal that opens a window at the next step; null: no handler.
        capture_poll_s: seconds between two looks for a ``capture`` request file in the output folder; 0: never.
        capture_signal_all_ranks: the signal sent to one rank opens the window on every rank, at one agreed step.
    """

    def __init__(
        self,
        output_dir: str | None = None,
        schedule: dict[str, Any] | None = None,
        activities: list[str] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        ranks: list[int] | None = None,
        max_trace_mb: float = 512.0,
        nvtx: bool = True,
        nvtx_domain: str = "perf_callbacks",
        nvtx_modules: bool = False,
        module_spans: bool = False,
        nsys_capture: bool = False,
        nsys_steps: list[int] | None = None,
        log_every_n_steps: int | None = None,
        log_min_interval_s: float = 0.5,
        memory: bool = True,
        nvml: bool = True,
        degradation_threshold: float = 0.2,
        data_wait_threshold: float = 0.1,
        data_wait_steps: int = 50,
        check_dataloaders: bool = True,
        summary: bool = True,
        verbose: bool = False,
        top_k: int = 5,
        flops: bool = True,
        flops_per_step: float | None = None,
        peak_tflops: float | None = None,
        peak_tbps: float | None = None,
        memory_history: int = 0,
        memory_history_start: int | None = None,
        storage_options: dict[str, Any] | None = None,
        hang_timeout: float | None = None,
        capture_on_anomaly: bool = False,
        capture_max_per_hour: int = 4,
        capture_signal: str | None = "SIGUSR2",
        capture_poll_s: float = 2.0,
        capture_signal_all_ranks: bool = False,
        **unknown: Any,
    ) -> None:
        options = {k: v for k, v in locals().items() if k not in ("self", "__class__", "unknown")}
        self.config = config_or_exit({**options, **unknown}, type(self).__name__)
        self.engine: PerfEngine | None = None
        self._phases: PhaseRanges | None = None  # the engine's phases: the phase hooks write them without a call
        self._stepped, self._created = False, now()  # _created: the ledger's start-up before and after us
        self._steps: int | None = None  # training steps that stepped an optimizer, the schedule's clock
        self._restored: int | None = None  # the count read from a checkpoint being resumed
        self._batch_size: int | None = None  # of the epoch's first batch

    @classmethod
    def from_config(cls, config: PerfConfig) -> GPUPerfCallback:
        """Build from an existing :class:`PerfConfig`."""
        return cls(**config.to_dict())

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> GPUPerfCallback:
        """Build from a standalone YAML file with the config keys at the top level."""
        return cls.from_config(PerfConfig.from_yaml(path))

    # ---- run lifecycle ---------------------------------------------------------------------------------------
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        first = next(cb for cb in trainer.callbacks if isinstance(cb, GPUPerfCallback))  # type: ignore[attr-defined]
        if first is not self:
            warn_user("a second GPUPerfCallback is on this Trainer (e.g. one from the config file and one from code); "
                      "it stands aside and the first one measures the run", InstrumentUnavailableWarning)
            return
        output_dir, remote = resolve_output(self._output_dir(trainer), trainer.global_rank)
        ctx = RunContext(
            output_dir=output_dir, remote=remote,
            run_name=trainer.strategy.broadcast(new_run_name()),
            rank=trainer.global_rank,
            world_size=trainer.world_size,
            device=trainer.strategy.root_device,
            log_every_n_steps=self.config.log_every_n_steps or max(1, getattr(trainer, "log_every_n_steps", 50)),
            log_min_interval_s=self.config.log_min_interval_s,
            log_metrics=metrics_sink(trainer) if trainer.is_global_zero else None,
            log_text=text_sink(trainer) if trainer.is_global_zero else None,
            distributed_initialized=distributed_initialized(),
            compute_dtype=mixed_precision_dtype(getattr(trainer, "precision", None)), created_at=self._created,
        )
        self.engine = PerfEngine(self.config, ctx)
        self._phases = self.engine.phases
        self.engine.attach_model(pl_module)
        self.engine.attach_owners(lambda: ([trainer.lightning_module], list(trainer.optimizers)))
        if isinstance(getattr(trainer, "profiler", None), PyTorchProfiler):
            self.engine.record_no_windows()
            warn_user("Trainer(profiler=PyTorchProfiler) records its own torch.profiler trace, and only one can run at "
                      "a time: perf-callbacks records no trace; NVTX ranges, metrics and checks go on. Remove "
                      "profiler='pytorch' to get perf-callbacks' windows", InstrumentUnavailableWarning)
        self._steps = self._restored = None
        wrap_save_checkpoint(trainer, self.engine)

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self.engine is not None and self._steps is not None:
            checkpoint[CHECKPOINT_KEY] = {"steps": self._steps}

    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        state = checkpoint.get(CHECKPOINT_KEY)
        if isinstance(state, dict) and isinstance(state.get("steps"), int):
            self._restored = state["steps"]

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.engine is None:
            return
        # a step: a training step that stepped an optimizer (manual optimization of two moves global_step by 2)
        self._steps, self._restored = (self._restored if self._restored is not None else trainer.global_step), None
        wrap_fetch(trainer, self.engine)
        check_train_loaders(trainer, self.engine, self.config.check_dataloaders)

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if self.engine is not None:
            self.engine.close(exception)
        undo_failed_fit(trainer, self.engine)  # Lightning calls no teardown hook after a failed fit

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and self.engine is not None:
            self.engine.close()
        if stage == "fit":
            unwrap_save_checkpoint(trainer)
            unwrap_fetch(trainer)

    # ---- per micro-batch -------------------------------------------------------------------------------------
    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._batch_size = None  # read from each epoch's first batch: a new fit or reloaded loaders may change it
        if self.engine is not None:  # the ledger's epoch boundaries (DataLoader worker start-up)
            self.engine.steps.epoch_start(self.engine.state.done, trainer.train_dataloader)

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.engine is None:
            return
        if self._batch_size is None:
            self._batch_size = batch_size(batch)
        self._stepped = False
        self.engine.batch_start(self._steps or 0)

    # the phase hooks write the phase as the engine's hot path does (PhaseRanges.enter): no call (0.4 us) if plain
    @override
    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        if (phases := self._phases) is not None:  # (manual optimization: an optimizer may have stepped before)
            phases.name, phases.state.own = "backward" if phases.plain else phases.enter("backward"), None

    @override
    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if (phases := self._phases) is not None:
            if phases.plain:
                phases.name = None
            else:
                phases.leave()

    @override
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if (phases := self._phases) is not None:
            self._stepped, phases.state.own = True, None
            phases.name = "optimizer_step" if phases.plain else phases.enter("optimizer_step")

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if (engine := self.engine) is None:
            return
        # stepped: on_before_optimizer_step ran, or (automatic optimization) global_step moved: a skipped step()
        if not (stepped := self._stepped) and pl_module.automatic_optimization:
            stepped = self._stepped = trainer.global_step > (self._steps or 0)
        engine.batch_end(stepped, self._batch_size)  # the engine adds up the step's micro-batches
        if stepped:
            self._steps = (self._steps or 0) + 1

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.engine is not None and _fitting(trainer):
            self.engine.validation_start()

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.engine is not None and _fitting(trainer):
            self.engine.validation_end()

    # ---- helpers -----------------------------------------------------------------------------------------------
    def _output_dir(self, trainer: pl.Trainer) -> str | Path:
        check_ranks(self.config.ranks, trainer.world_size)
        return self.config.output_dir if self.config.output_dir is not None else default_output_dir(trainer)


def _fitting(trainer: pl.Trainer) -> bool:
    return trainer.state.fn == "fit" and not trainer.sanity_checking

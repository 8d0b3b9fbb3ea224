"""What an adapter tells the engine about the run: where to write, which rank this is, where metrics go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

MetricsFn = Callable[[dict[str, float], int], None]
TextFn = Callable[[str, str, int], None]


@dataclass
class RunContext:
    """What the adapter knows about the run.

    Args:
        output_dir: resolved output directory (for a remote ``output_dir``, this rank's local staging folder).
        run_name: the same on every rank of this run (see ``traces.new_run_name``).
        rank: global rank.
        world_size: number of ranks.
        device: this rank's device (CUDA device, or None/CPU).
        log_every_n_steps: memory and timing log interval, in optimizer steps.
        log_min_interval_s: the least wall time between two logged intervals (a multiple of ``log_every_n_steps``
            in faster loops); 0: every ``log_every_n_steps`` steps. An adapter whose logging is a cross-rank
            collective gives 0 (every rank must log at the same count).
        log_metrics: receives ``{"perf/...": value}`` and the step; None disables metric logging.
        log_text: receives (tag, text, step) for the window summary; optional.
        log_summary: receives the window summary's scalars on the reporting rank alone; default ``log_metrics``
            (an adapter whose ``log_metrics`` is a cross-rank collective must give a local one here).
        data_loader: name and num_workers of the training loader, quoted by the data-wait warning.
        local_world_size: ranks on this machine, when the framework knows it (Lightning's devices); else
            ``$LOCAL_WORLD_SIZE`` is used, then 1. Written with the CPU count into each window's trace.
        distributed_initialized: ``torch.distributed`` is initialised (else the trace gets ``distributedInfo``).
        advice: rewrites a warning's advice in the framework's own terms (e.g. ``dataloader_num_workers`` for
            ``transformers.TrainingArguments``); default unchanged.
        compute_dtype: the dtype of the framework's mixed precision (bf16/fp16 autocast), when it has one: the peak
            FLOP/s is looked up for it unless a counted step shows the dtype itself.
        remote: the URL of a remote ``output_dir`` whose files are staged in ``output_dir`` and uploaded
            (see ``core/files/remote.py``); None when ``output_dir`` is local.
        created_at: ``time.perf_counter()`` when the adapter (the user's callback or hook) was made: the ledger shows
            the start-up before and after it apart; None: the engine's construction stands for it.
    """

    output_dir: Path
    run_name: str
    rank: int = 0
    world_size: int = 1
    device: torch.device | None = None
    log_every_n_steps: int = 50
    log_min_interval_s: float = 0.0
    log_metrics: MetricsFn | None = None
    log_text: TextFn | None = None
    log_summary: MetricsFn | None = None
    data_loader: tuple[str, int | None] = ("train_dataloader", None)
    local_world_size: int | None = None
    distributed_initialized: bool = False
    advice: Callable[[str], str] | None = None
    compute_dtype: torch.dtype | None = None
    remote: str | None = None
    created_at: float | None = None

    def rephrase(self, message: str) -> str:
        """``message`` in the framework's own terms (see ``advice``)."""
        return self.advice(message) if self.advice is not None else message

    @property
    def distributed_info(self) -> dict[str, object] | None:
        """The trace's ``distributedInfo`` when ``torch.distributed`` does not write it (not initialised)."""
        if self.distributed_initialized:
            return None
        return {"backend": "", "rank": self.rank, "world_size": self.world_size}

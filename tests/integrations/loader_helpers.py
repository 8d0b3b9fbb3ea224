"""Loaders whose workers wait or burn the CPU, a machine kept busy on known cores, and a Lightning run of either.

Shared by the tests of the loader advice and of CPU contention (``test_loader_advice.py``, ``test_cpu_contention.py``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from perf_callbacks import GPUPerfCallback
from perf_callbacks.analysis import AnalysisResult, analyze
from tests.integrations.lit_helpers import TinyModel, trainer

WINDOW = {"skip_first": 14, "wait": 0, "warmup": 1, "active": 10, "repeat": 1}  # steps 15-24, after the check
QUIET_BUT_LOADER = {"degradation_threshold": 1e6, "check_dataloaders": False, "data_wait_steps": 12}


class Fetching(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample takes ``ms``: asleep (``burn=False``: storage, the network) or spinning on the CPU."""

    def __init__(self, ms: float, burn: bool = False, n: int = 4096) -> None:
        self.ms, self.burn, self.n = ms, burn, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.burn:
            end = time.thread_time() + self.ms / 1e3  # CPU time: a busy machine stretches it, as it does real work
            while time.thread_time() < end:
                pass
        else:
            time.sleep(self.ms / 1e3)
        return torch.full((16,), float(i % 7)), torch.tensor(i % 4)


class Stepping(TinyModel):
    """A training step that waits ``step_ms`` (as a host waits for its device) around a tiny model."""

    def __init__(self, data: Dataset[Any], num_workers: int, step_ms: float, batch_size: int = 4,
                 jitter: list[float] | None = None) -> None:
        super().__init__()
        self.data, self.num_workers, self.step_ms, self.batch_size = data, num_workers, step_ms, batch_size
        self.jitter = jitter or [0.0]

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        time.sleep(max(self.step_ms + self.jitter[batch_idx % len(self.jitter)], 0.0) / 1e3)
        return super().training_step(batch, batch_idx)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data, batch_size=self.batch_size, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)


def in_memory(n: int = 4096) -> TensorDataset:
    """A fast in-memory dataset."""
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g))


def train(tmp: Path, model: Stepping, steps: int = 25, **config: Any) -> AnalysisResult:
    """Train ``model`` with the callback (window ``WINDOW``) and return the analysis of its window."""
    cb = GPUPerfCallback(output_dir=str(tmp / "perf"), schedule=WINDOW, **{**QUIET_BUT_LOADER, **config})
    trainer(tmp, [cb], max_steps=steps, limit_val_batches=0).fit(model)
    (window,) = sorted((tmp / "perf").glob("*/window-*"))
    return analyze(window)


@contextlib.contextmanager
def cores(n: int) -> Iterator[set[int]]:
    """Pin this thread (and what it starts: loader workers) to ``n`` of its cores (fewer if it has fewer)."""
    before = os.sched_getaffinity(0)
    chosen = set(sorted(before)[:n])
    os.sched_setaffinity(0, chosen)
    try:
        yield chosen
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def busy(on: set[int], processes: int) -> Iterator[None]:
    """``processes`` processes spinning on the cores ``on``, already spinning when this enters; stopped when it ends."""
    code = f"import os\nos.sched_setaffinity(0, {sorted(on)!r})\nprint(flush=True)\nwhile True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) for _ in range(processes)]
    try:
        for p in procs:
            assert p.stdout is not None
            p.stdout.readline()
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()

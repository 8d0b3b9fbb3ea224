"""A fast in-memory loader with ``num_workers=0`` is never an input-bound window, even with one slow fetch in it.

The loop that found it: a ``TensorDataset`` read in the training process, several windows, a loaded machine. One
fetch that stalls (here a 150 ms sleep, in the middle window) made that window ``input_bound`` with "try
num_workers=2" (workers make such a loader slower). The step's own work is a ``SPIN_MS`` spin of wall time, which a
loaded machine does not lengthen, while it does stretch the fetch (CPU work, recorded op by op in a window: about 1 ms
idle, 2.3 ms measured under ``burn.py 2``, which at a 30 ms spin made 7.7% of the median step and so "material"
advice). At 100 ms, a fetch would have to take 5 ms (four times its idle cost) before advice is given.

The verdict reads the median step, so a window survives as many outlier steps as it has steps above its median: with
3 steps, the stall plus one fetch preempted for 7 ms on a loaded machine (6.5% of its step: seen once in four loaded
whole-suite runs) made the median and gave the advice. Windows of 5 steps hold the stall and one more outlier.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from perf_callbacks import GPUPerfCallback
from perf_callbacks.analysis import analyze
from tests.integrations.hf_helpers import QUIET
from tests.integrations.lit_helpers import TinyModel, trainer

SCHEDULE = {"skip_first": 2, "wait": 1, "warmup": 1, "active": 5, "repeat": 3}  # windows 4-8, 11-15, 18-22
SPIN_MS = 100.0
HICCUP_S = 0.15
HICCUP_BATCH = 13  # step 13 (the 14th batch): the middle of the second window


class InMemory(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A tensor dataset whose batch ``HICCUP_BATCH`` stalls once (a preempted fetch)."""

    def __init__(self, n: int = 256, batch_size: int = 8) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g)
        self.stall_at = HICCUP_BATCH * batch_size

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i == self.stall_at:
            time.sleep(HICCUP_S)
        return self.x[i], self.y[i]


class Spinning(TinyModel):
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        end = time.perf_counter() + SPIN_MS / 1e3
        while time.perf_counter() < end:
            pass
        return super().training_step(batch, batch_idx)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
        return DataLoader(InMemory(), batch_size=8, num_workers=0)


def test_one_slow_fetch_does_not_make_a_fast_loader_input_bound(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule=SCHEDULE, **QUIET)
    trainer(tmp_path, [cb], max_steps=23, limit_val_batches=0).fit(Spinning())
    windows = sorted((tmp_path / "perf").glob("*/window-*"))
    assert [w.name for w in windows] == ["window-000004-000008", "window-000011-000015", "window-000018-000022"]
    for window in windows:
        result = analyze(window, sidecars=False)
        assert result.verdict != "input_bound", (window.name, result.data_wait_fraction, result.verdict_note)
        assert not any("num_workers" in r for r in result.recommendations), (window.name, result.recommendations)
    stalled = analyze(windows[1], sidecars=False)
    assert stalled.data_wait_fraction >= 0.10, stalled.data_wait_fraction  # the sum alone would say input_bound
    assert "a few slow fetches (the longest" in stalled.verdict_note or "the median step waited" in \
        stalled.verdict_note, stalled.verdict_note

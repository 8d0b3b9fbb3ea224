"""GPUPerfCallback with manual optimization and gradient accumulation, when training ends mid-accumulation.

The last epoch ends with a micro-batch whose optimizer step never comes: that step is not a recorded step. The
window's folder, its trace and its summary all name and count the steps that completed their optimizer step.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn

from perf_callbacks import GPUPerfCallback
from tests.integrations.lit_helpers import loader, trainer

QUIET = {"degradation_threshold": 1e6, "data_wait_steps": 100_000, "check_dataloaders": False}
SCHEDULE = {"skip_first": 3, "wait": 0, "warmup": 1, "active": 3}  # records steps 4-6


class ManualAccumulation(L.LightningModule):
    """Manual optimization: one optimizer step every ``k`` batches of an epoch (the epoch's tail carries over)."""

    def __init__(self, k: int = 2) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.layer, self.k = nn.Linear(16, 4), k

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        opt = self.optimizers()
        x, y = batch
        self.manual_backward(nn.functional.cross_entropy(self.layer(x), y) / self.k)
        if (batch_idx + 1) % self.k == 0:
            opt.step()  # type: ignore[union-attr]
            opt.zero_grad()  # type: ignore[union-attr]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize(("epochs", "window", "header"), [
    # 7 batches an epoch, a step every 2: epoch 1's last batch begins step 6, whose optimizer step never comes
    (2, "window-000004-000005", "steps 4-5, rank 0 (partial: 2 of 3 scheduled steps completed)"),
    # a third epoch completes step 6 (its micro-batches span the epoch boundary): the whole window
    (3, "window-000004-000006", "steps 4-6, rank 0"),
])
def test_an_epoch_ending_mid_accumulation_names_only_completed_steps(
    tmp_path: Path, epochs: int, window: str, header: str
) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule=SCHEDULE, **QUIET)
    t = trainer(tmp_path, [cb], max_steps=-1, max_epochs=epochs, limit_train_batches=7)
    t.fit(ManualAccumulation(), loader())
    assert t.global_step == 3 * epochs  # optimizer steps that ran
    (run,) = (tmp_path / "perf").iterdir()
    assert [w.name for w in run.glob("window-*")] == [window]
    first, last = (int(n) for n in window.split("-")[1:])
    steps = list(range(first, last + 1))
    data = json.load(gzip.open(run / window / "rank0.pt.trace.json.gz"))
    spans = [e for e in data["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert sorted(int(e["name"].split("#")[1]) for e in spans) == steps
    assert (run / window / "summary.txt").read_text().splitlines()[0] == f"perf-callbacks summary: {header}"
    assert json.loads((run / window / "rank0.summary.json").read_text())["meta"]["steps"] == steps
    # the left-out step's work is out of the trace too, not left behind outside any step
    end = max(e["ts"] + e["dur"] for e in spans)
    assert not [e["name"] for e in data["traceEvents"] if e.get("cat") == "cpu_op" and e["ts"] >= end]

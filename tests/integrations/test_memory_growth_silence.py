"""Healthy runs of each adapter never warn of memory growth: 80 steps read every 2 (40 readings of the host RSS),
with two profiling windows (whose profiler lifts the RSS once each), validation (Lightning, transformers), an Adam
optimizer (its state appears at the first step) and a DataLoader worker. Checked once on a machine kept busy by
``../shared/tools/burn.py 2`` (see the branch's report)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks import MemoryGrowthWarning

STEPS, EVERY = 80, 2
SCHEDULE = {"skip_first": 10, "wait": 20, "warmup": 1, "active": 2, "repeat": 2}
pytestmark = pytest.mark.slow  # about 25 s of CPU for the three runs
OPTIONS: dict[str, Any] = {"schedule": SCHEDULE, "log_every_n_steps": EVERY, "degradation_threshold": 1e6,
                           "data_wait_steps": 1000, "check_dataloaders": False,
                           "log_min_interval_s": 0}  # a reading at every logging step: the most chances to cry wolf


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def dataset(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 64, generator=g), torch.randint(0, 4, (n,), generator=g))


def readings(engine: Any) -> int:
    return int(engine.growth.detector.seen) if engine.growth is not None else 0


def test_a_healthy_lightning_run_is_silent(tmp_path: Path) -> None:
    import lightning as L

    from perf_callbacks import GPUPerfCallback
    from tests.integrations.lit_helpers import trainer

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            loss = nn.functional.cross_entropy(self.net(batch[0]), batch[1])
            self.log("loss", loss)
            return loss

        def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
            self.log("val_loss", nn.functional.cross_entropy(self.net(batch[0]), batch[1]))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), **OPTIONS)
    loader = DataLoader(dataset(64 * STEPS), batch_size=64, num_workers=1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer(tmp_path, [cb], max_steps=STEPS, val_check_interval=20, log_every_n_steps=EVERY).fit(
            Model(), loader, DataLoader(dataset(128), batch_size=64))
    assert [str(w.message) for w in seen if issubclass(w.category, MemoryGrowthWarning)] == []
    assert readings(cb.engine) >= 30


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_a_healthy_accelerate_run_is_silent(tmp_path: Path) -> None:
    from accelerate import Accelerator

    from perf_callbacks import AcceleratePerfHook

    acc = Accelerator(cpu=True)
    model = mlp()
    model, opt, dl = acc.prepare(model, torch.optim.Adam(model.parameters(), lr=1e-3),
                                 DataLoader(dataset(64 * STEPS), batch_size=64, num_workers=1))
    hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf"), **OPTIONS).register(acc)
    logged = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with hook:
            for x, y in hook.iter(dl):
                loss = nn.functional.cross_entropy(model(x), y)
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
                logged.append(loss.item())
    assert [str(w.message) for w in seen if issubclass(w.category, MemoryGrowthWarning)] == []
    assert readings(hook.engine) >= 30 and len(logged) == STEPS


def test_a_healthy_transformers_run_is_silent(tmp_path: Path) -> None:
    from tests.integrations.hf_helpers import callback, make_trainer

    cb = callback(tmp_path / "perf", **OPTIONS)
    trainer = make_trainer(tmp_path, [cb], max_steps=STEPS, n=4 * STEPS, eval_steps=20, dataloader_num_workers=1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer.train()
    assert [str(w.message) for w in seen if issubclass(w.category, MemoryGrowthWarning)] == []
    assert readings(cb.engine) >= 30

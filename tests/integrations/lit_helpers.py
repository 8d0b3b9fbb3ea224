"""A tiny LightningModule and data for the Lightning adapter tests.

Also a LightningCLI run of them from a YAML config, and a logger that keeps what the callback logs.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from lightning.pytorch.loggers import Logger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if TYPE_CHECKING:
    from lightning.pytorch.cli import LightningCLI


class TinyModel(L.LightningModule):
    def __init__(self, fail_at_step: int | None = None) -> None:
        super().__init__()
        self.layer = nn.Linear(16, 4)
        self.fail_at_step = fail_at_step

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.fail_at_step is not None and self.trainer.global_step == self.fail_at_step:
            raise ValueError(f"user error at step {self.fail_at_step}")
        x, y = batch
        return nn.functional.cross_entropy(self.layer(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class SlowDataset(torch.utils.data.Dataset):
    """A dataset whose __getitem__ does ``ms`` of host work per sample (decoding, augmentation...)."""

    def __init__(self, n: int = 256, ms: float = 1.0) -> None:
        self.n, self.ms = n, ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        import time

        end = time.perf_counter() + self.ms / 1e3
        while time.perf_counter() < end:
            pass
        return torch.full((16,), float(i % 7)), torch.tensor(i % 4)


def loader(n: int = 256, batch_size: int = 8, num_workers: int = 0) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g))
    return DataLoader(data, batch_size=batch_size, num_workers=num_workers)


class TinyData(L.LightningDataModule):
    def train_dataloader(self):  # noqa: ANN201
        return loader(num_workers=1)


def write_config(tmp_path: Path, init_args: str) -> Path:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"""
trainer:
  max_steps: 6
  accelerator: cpu
  devices: 1
  logger: false
  enable_progress_bar: false
  enable_checkpointing: false
  enable_model_summary: false
  default_root_dir: {tmp_path}
  callbacks:
    - class_path: perf_callbacks.GPUPerfCallback
      init_args:
{init_args}
""")
    return cfg


def run_cli(cfg: Path) -> LightningCLI:
    from lightning.pytorch.cli import LightningCLI  # jsonargparse: only where a test runs the CLI

    return LightningCLI(TinyModel, TinyData, args=["fit", "--config", str(cfg)], save_config_callback=None)


def trainer(tmp_path: Path, callbacks: list, **kwargs: object) -> L.Trainer:
    defaults: dict[str, object] = {
        "max_steps": 10,
        "accelerator": "cpu",
        "devices": 1,
        "default_root_dir": str(tmp_path),
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": False,
        "logger": False,
        "num_sanity_val_steps": 0,
        "limit_val_batches": 2,
    }
    defaults.update(kwargs)
    return L.Trainer(callbacks=callbacks, **defaults)


class Recorder(Logger):
    """Keeps what the callback logs, by step."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recorder"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.rows.append((step or 0, dict(metrics)))

    def series(self, key: str) -> list[float]:
        return [m[key] for _, m in self.rows if key in m]


def events(path: Path) -> list[dict]:
    return json.load(gzip.open(path))["traceEvents"]


def profiler_steps(path: Path) -> list[int]:
    return sorted(int(e["name"].split("#")[1]) for e in events(path) if e.get("name", "").startswith("ProfilerStep#"))


def names(path: Path, prefix: str = "perf_callbacks.") -> list[str]:
    return [e["name"] for e in events(path) if e.get("name", "").startswith(prefix)]

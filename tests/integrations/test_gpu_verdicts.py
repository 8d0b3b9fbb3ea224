"""End-to-end verdicts on a GPU: three short Lightning fits built to be input-, host- and compute-bound.

Each fit profiles one window through ``GPUPerfCallback``; the report must give the built-in bottleneck, and its GPU
utilization must match an independent count (the union of kernel, memcpy and memset intervals over the ProfilerStep
span, as ``shared/fixtures/gpu_traces/busy.py`` counts it) within 1 point. For the compute-bound fit the batches are
built on the GPU ahead of time (``batch_size=None``), so that collation does not make it input-bound.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from perf_callbacks import GPUPerfCallback
from perf_callbacks.analysis import analyze

pytestmark = pytest.mark.gpu
SCHEDULE = {"skip_first": 3, "wait": 0, "warmup": 1, "active": 3}


class SlowSamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """CPU work in ``__getitem__`` (decoding, augmentation): 2 ms a sample."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
        return torch.randn(256), torch.randn(1)


class OnDevice(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Whole batches already on the GPU: no collation, no copies."""

    def __init__(self, batch: int, dim: int, n: int = 64) -> None:
        self.x = torch.randn(batch, dim, device="cuda")
        self.y = torch.randn(batch, 1, device="cuda")
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y


class MLP(L.LightningModule):
    def __init__(self, dim: int, width: int, depth: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(dim, width), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.Linear(width, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-4)


def fit(tmp_path: Path, model: L.LightningModule, loader: DataLoader[Any], **trainer: Any) -> Path:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule=SCHEDULE, check_dataloaders=False,
                         data_wait_steps=10**6, degradation_threshold=1e6)
    L.Trainer(accelerator="cuda", devices=1, max_steps=8, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False, callbacks=[cb], **trainer).fit(model, loader)
    (trace,) = cb.engine.exported
    return trace


def busy_fraction(trace: Path) -> float:
    """The independent count: union of device intervals over [first step start, max(last step end, last op end)]."""
    events = json.load(gzip.open(trace))["traceEvents"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")]
    lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    ops = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    hi = max([hi] + [b for _, b in ops])
    busy, start, end = 0.0, None, None
    for a, b in ops:
        if end is None or a > end:
            busy += (end - start) if end is not None and start is not None else 0.0
            start, end = a, b
        else:
            end = max(end, b)
    busy += (end - start) if end is not None and start is not None else 0.0
    return busy / (hi - lo)


def check(trace: Path, verdict: str) -> None:
    result = analyze(trace)
    assert result.verdict == verdict, (result.verdict, result.recommendations)
    assert result.gpu_utilization is not None
    assert abs(result.gpu_utilization - busy_fraction(trace)) <= 0.01


def test_input_bound(tmp_path: Path) -> None:
    loader = DataLoader(SlowSamples(), batch_size=16, num_workers=0)
    check(fit(tmp_path, MLP(256, 256, 2), loader), "input_bound")


def test_host_bound(tmp_path: Path) -> None:
    loader = DataLoader(OnDevice(batch=32, dim=64), batch_size=None)
    check(fit(tmp_path, MLP(64, 64, 12), loader), "host_bound")


def test_compute_bound(tmp_path: Path) -> None:
    loader = DataLoader(OnDevice(batch=8192, dim=4096), batch_size=None)
    check(fit(tmp_path, MLP(4096, 8192, 6), loader), "compute_bound")

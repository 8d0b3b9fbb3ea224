"""A Lightning module that keeps a probe of its features every step: with the probe's graph, or detached.

The probe is a second forward of the batch that the loss never backwards (features kept to look at later): kept with
its graph it holds what its ops saved (the ReLUs' outputs, the batch), which ``.detach()`` frees; detached it holds
only its own output (``aten::addmm``, 1 MiB a step), which ``.detach()`` shares and does not free. The schedule's one
window is at steps 6-8, long before the growth is told: only the window the warning opens can name the operator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks import GPUPerfCallback, MemoryGrowthWarning
from tests.integrations.lit_helpers import trainer

ROOT = Path(__file__).resolve().parents[2]
BATCH, IN, HIDDEN, OUT = 256, 32, 256, 1024  # the probe's output: 256 x 1024 floats, 1 MiB a step
STEPS = 240  # told at step 221, its window 222-224
OPTIONS: dict[str, Any] = {"schedule": {"skip_first": 5, "wait": 0, "warmup": 1, "active": 3},
                           "log_every_n_steps": 2, "degradation_threshold": 1e6, "profile_memory": True,
                           "log_min_interval_s": 0, "check_dataloaders": False, "data_wait_steps": 10_000}


class Prober(L.LightningModule):
    def __init__(self, detach: bool) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                                 nn.Linear(HIDDEN, OUT))
        self.detach, self.probes = detach, []  # type: ignore[var-annotated]

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x)[:, :1], y)
        probe = self.net(x)  # features to look at later: a forward the loss never backwards
        self.probes.append(probe.detach() if self.detach else probe)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def run(out: Path, detach: bool) -> dict[str, Any]:
    """One run: the warnings, the growth measured and passed to windows, the last window's finding and text."""
    from perf_callbacks.analysis import analyze
    from perf_callbacks.analysis.render.text import format_text

    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(BATCH * STEPS, IN, generator=g), torch.randn(BATCH * STEPS, 1, generator=g))
    cb = GPUPerfCallback(output_dir=str(out / "perf"), **OPTIONS)
    model = Prober(detach)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer(out, [cb], max_steps=STEPS, limit_val_batches=0).fit(
            model, DataLoader(ds, batch_size=BATCH, num_workers=0))
    growth = cb.engine.growth
    windows = sorted(cb.engine.layout.run_dir.glob("window-*"))
    analysed = analyze(windows[-1])
    probe = model.probes[-1]
    return {"warnings": [str(w.message) for w in seen if issubclass(w.category, MemoryGrowthWarning)],
            "rate": growth.growth.rate if growth is not None and growth.growth is not None else None,
            "windows": [w.name for w in windows], "found": analysed.memory.growth, "text": format_text(analysed),
            "probe_bytes": probe.untyped_storage().nbytes()}


def run_in_child(out: Path) -> dict[str, Any]:
    """Both runs in a child whose glibc maps each allocation above 128 KiB on its own (the RSS follows the tensors:
    see ``growth_helpers.run_in_child``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore", "MALLOC_MMAP_THRESHOLD_": "131072"}
    proc = subprocess.run([sys.executable, "-m", "tests.integrations.growth_lit_helpers", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads((out / "growth.json").read_text()))


if __name__ == "__main__":
    target = Path(sys.argv[1])
    result = {name: run(target / name, detach) for name, detach in (("graph", False), ("detached", True))}
    (target / "growth.json").write_text(json.dumps(result))

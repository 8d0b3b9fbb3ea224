"""Per-phase peaks through the real adapters' hook order (Lightning Trainer, Accelerator), on CPU.

CPU has no allocator peak counter, so the device is played by ``HostPeak`` (the CUDA counter's semantics), and the
model allocates known amounts in forward, backward and the optimizer step: each must land in its own phase.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
from torch import nn

from perf_callbacks import AcceleratePerfHook, GPUPerfCallback
from perf_callbacks.core.memory.phase_peaks import PhasePeaks
from tests.core.engine_helpers import HostPeak
from tests.integrations.lit_helpers import TinyModel, loader, trainer

EXPECTED = {"forward": 100.0, "backward": 400.0, "optimizer_step": 50.0}


class AllocInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dev: HostPeak) -> torch.Tensor:
        ctx.dev = dev
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        ctx.dev.alloc(300)  # gradients on top of the 100 of activations
        ctx.dev.free(400)
        return grad, None


def allocating_optimizer(params: Any, dev: HostPeak) -> torch.optim.Optimizer:
    opt = torch.optim.SGD(params, lr=0.1)
    opt.register_step_post_hook(lambda *_: (dev.alloc(50), dev.free(50)))
    return opt


class Allocating(TinyModel):
    def __init__(self, dev: HostPeak) -> None:
        super().__init__()
        self.dev = dev

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.dev.alloc(100)  # activations
        return AllocInBackward.apply(super().training_step(batch, batch_idx), self.dev)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return allocating_optimizer(self.parameters(), self.dev)


def patched(dev: HostPeak) -> Any:
    return mock.patch.object(PhasePeaks, "for_device", return_value=PhasePeaks(dev.read_and_reset, 80 * 10**9))


def test_lightning_phases_get_their_own_peaks(tmp_path: Path) -> None:
    dev = HostPeak()
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), check_dataloaders=False, log_every_n_steps=3,
                         degradation_threshold=1e6)
    with patched(dev):
        trainer(tmp_path, [cb], max_steps=8).fit(Allocating(dev), loader())
    peaks = cb.engine.mem.peaks
    assert peaks is not None and peaks.step == 6 and peaks.last == EXPECTED  # the step after the log at step 6
    assert peaks.headline() == "peak in backward: 0.4 of 80 GB (step 6)"


accelerate = pytest.importorskip("accelerate")
from accelerate import Accelerator  # noqa: E402


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_phases_get_their_own_peaks(tmp_path: Path) -> None:
    dev = HostPeak()
    acc = Accelerator(cpu=True)
    model = nn.Linear(16, 4)
    model, opt, dl = acc.prepare(model, allocating_optimizer(model.parameters(), dev), loader(n=64))
    with patched(dev):
        hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf"), check_dataloaders=False, log_every_n_steps=3,
                                  degradation_threshold=1e6).register(acc)
    with hook:
        for x, y in hook.iter(dl):
            dev.alloc(100)
            acc.backward(AllocInBackward.apply(nn.functional.cross_entropy(model(x), y), dev))
            opt.step()
            opt.zero_grad()
    assert hook.optimizer_steps == 8
    assert hook.engine.mem.peaks is not None and hook.engine.mem.peaks.step == 6 and hook.engine.mem.peaks.last == EXPECTED

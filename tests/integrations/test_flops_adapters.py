"""FLOPs per step in each adapter: counted on one real step (Lightning, Accelerate, transformers), or given."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch.utils.flop_counter import FlopCounterMode

from perf_callbacks import GPUPerfCallback, TransformersPerfCallback
from perf_callbacks.core.flops.count import extra_formulas
from tests.integrations.lit_helpers import TinyModel, loader, trainer

NO_WINDOWS = {"skip_first": 1000}


def counted(fn: Callable[[], None], times: int) -> int:
    """What FlopCounterMode, run by the test, counts for ``times`` calls of ``fn`` (a forward and backward)."""
    with FlopCounterMode(display=False, custom_mapping=extra_formulas()) as counter:
        for _ in range(times):
            fn()
    return int(counter.get_total_flops())


class Mlp(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def lightning_expected(model: Mlp, micro: int) -> int:
    x, y = next(iter(loader(batch_size=8)))
    twin = copy.deepcopy(model)
    return counted(lambda: twin.training_step((x, y), 0).backward(), micro)


@pytest.mark.parametrize("accumulate", [1, 4])
def test_lightning_counts_one_step_of_every_micro_batch(tmp_path: Path, accumulate: int) -> None:
    model = Mlp()
    expected = lightning_expected(model, accumulate)
    cb = GPUPerfCallback(schedule=NO_WINDOWS, check_dataloaders=False, data_wait_steps=1000)
    trainer(tmp_path, [cb], max_steps=4, accumulate_grad_batches=accumulate).fit(model, loader(batch_size=8))
    assert cb.engine is not None and cb.engine.flops.counted_step == 0
    assert cb.engine.flops.per_step == pytest.approx(expected, rel=0.01)
    assert _get_current_dispatch_mode_stack() == []


def test_lightning_bf16_mixed_is_the_compute_dtype(tmp_path: Path) -> None:
    cb = GPUPerfCallback(schedule=NO_WINDOWS, check_dataloaders=False, data_wait_steps=1000)
    trainer(tmp_path, [cb], max_steps=3, precision="bf16-mixed").fit(Mlp(), loader(batch_size=8))
    assert cb.engine is not None and cb.engine.ctx.compute_dtype is torch.bfloat16
    assert cb.engine.flops.dtype is torch.bfloat16  # what the counted step's matmuls ran in
    assert cb.engine.flops.meta()["dtype"] == "bf16"


def test_a_lightning_modules_flops_per_batch_wins(tmp_path: Path) -> None:
    model = Mlp()
    model.flops_per_batch = 7e6  # as Lightning's ThroughputMonitor reads it
    cb = GPUPerfCallback(schedule=NO_WINDOWS, check_dataloaders=False, data_wait_steps=1000)
    trainer(tmp_path, [cb], max_steps=3, accumulate_grad_batches=2).fit(model, loader(batch_size=8))
    assert cb.engine is not None and cb.engine.flops.counted_step is None
    assert cb.engine.flops.per_step == 2 * 7e6


class TinyWithFlops(TinyModel):
    flops_per_batch = 1e6  # the config key comes first


def test_flops_per_step_in_lightningcli_yaml_wins(tmp_path: Path) -> None:
    from lightning.pytorch.cli import LightningCLI

    from tests.integrations.lit_helpers import TinyData, write_config

    cfg = write_config(tmp_path, f"""        output_dir: {tmp_path / 'perf'}
        schedule: {{skip_first: 1000}}
        flops_per_step: 5.0e9
        peak_tflops: 2
        data_wait_steps: 1000
""")
    cli = LightningCLI(TinyWithFlops, TinyData, args=["fit", "--config", str(cfg)], save_config_callback=None)
    (cb,) = [c for c in cli.trainer.callbacks if isinstance(c, GPUPerfCallback)]
    assert cb.config.flops_per_step == 5e9 and cb.config.peak_tflops == 2
    assert cb.engine is not None and cb.engine.flops.per_step == 5e9 and cb.engine.flops.counted_step is None
    assert cb.engine.flops.source == "flops_per_step (config)"
    assert cb.engine.flops.peak() == (2e12, "peak_tflops: 2")


@pytest.mark.usefixtures("fresh_accelerate_state")
@pytest.mark.parametrize("ga", [1, 4])
def test_accelerate_counts_one_step_of_every_micro_batch(tmp_path: Path, ga: int) -> None:
    from tests.integrations.acc_helpers import data, setup, train

    acc, hook, parts = setup(tmp_path, ga=ga, n=64, schedule=NO_WINDOWS, data_wait_steps=1000)
    model = parts[0]
    x, y = next(iter(data(64, num_workers=0)))
    twin = copy.deepcopy(acc.unwrap_model(model))
    expected = counted(lambda: nn.functional.mse_loss(twin(x), y).backward(), ga)
    with hook:
        train(acc, hook, parts)
    assert hook.engine is not None and hook.engine.flops.counted_step == 0
    assert hook.engine.flops.per_step == pytest.approx(expected, rel=0.01)
    assert _get_current_dispatch_mode_stack() == []


@pytest.mark.parametrize("ga", [1, 3])
def test_transformers_counts_one_step_of_every_micro_batch(tmp_path: Path, ga: int) -> None:
    from tests.integrations.hf_helpers import QUIET, Samples, Tiny, make_trainer

    cb = TransformersPerfCallback(schedule=NO_WINDOWS, **QUIET)
    hf = make_trainer(tmp_path, [cb], max_steps=4, ga=ga)
    batch = {k: torch.stack([Samples()[i][k] for i in range(4)]) for k in ("x", "labels")}
    twin = copy.deepcopy(hf.model)
    assert isinstance(twin, Tiny)
    expected = counted(lambda: twin(**batch)["loss"].backward(), ga)
    hf.train()
    assert cb.engine is not None and cb.engine.flops.counted_step == 0
    assert cb.engine.flops.per_step == pytest.approx(expected, rel=0.01)
    assert _get_current_dispatch_mode_stack() == []

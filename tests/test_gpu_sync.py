"""On CUDA, GPUPerfCallback adds no host-device synchronisation outside profiling windows.

``torch.cuda.set_sync_debug_mode("error")`` is switched on by a helper callback placed before ours, in
``on_train_batch_start``, and off by one placed after ours, in ``on_train_batch_end``, on every step outside the
window (with a margin around it, where the profiler starts and stops). Anything that synchronises in between, in
our hooks or in the training step, raises. The model logs nothing and never calls ``.item()``, so it cannot sync
itself; a control run without our callback proves that, and another proves the mode does catch a sync.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

pl = pytest.importorskip("lightning.pytorch")

from lightning.pytorch.callbacks import Callback  # noqa: E402

from perf_callbacks import GPUPerfCallback  # noqa: E402
from perf_callbacks.exceptions import PerfWarning  # noqa: E402

STEPS = 20
SCHEDULE = {"skip_first": 8, "wait": 1, "warmup": 1, "active": 2, "repeat": 1}  # warm-up step 9, recorded 10-11
# Not checked: the first two steps (cuBLAS and allocator set-up), and the window with one step either side (the
# profiler is created at the end of step 8 and stopped and exported at the end of step 11).
CHECKED = [s for s in range(2, STEPS) if not 8 <= s <= 12]


class TinyMLP(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)  # no self.log: logging a tensor may sync

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


class SyncCheckOn(Callback):
    """Placed first: turns the sync check on at the start of each checked step."""

    def __init__(self, checked: list[int], inject_sync: bool = False) -> None:
        self.checked, self.inject_sync = set(checked), inject_sync
        self.armed: list[int] = []

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step in self.checked:
            torch.cuda.set_sync_debug_mode("error")
            self.armed.append(trainer.global_step)
            if self.inject_sync:
                torch.cuda.synchronize()


class SyncCheckOff(Callback):
    """Placed last: turns the check off after every other hook of the step has run."""

    def on_train_batch_end(self, *args: Any) -> None:
        torch.cuda.set_sync_debug_mode(0)

    def on_exception(self, *args: Any) -> None:
        torch.cuda.set_sync_debug_mode(0)


@pytest.fixture(autouse=True)
def _reset_sync_mode() -> Iterator[None]:
    yield
    torch.cuda.set_sync_debug_mode(0)


def loader() -> torch.utils.data.DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(32, 64, generator=g), torch.randn(32, 64, generator=g)) for _ in range(STEPS)]
    return torch.utils.data.DataLoader(batches, batch_size=None)


def fit(tmp_path: Path, callbacks: list[Callback]) -> None:
    trainer = pl.Trainer(
        accelerator="cuda",
        devices=1,
        max_steps=STEPS,
        logger=False,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=tmp_path,
    )
    trainer.fit(TinyMLP(), loader())


def perf_callback(tmp_path: Path) -> GPUPerfCallback:
    return GPUPerfCallback(
        output_dir=str(tmp_path / "perf"),
        schedule=SCHEDULE,
        log_every_n_steps=2,  # memory (and NVML, when installed) sampled on every other checked step
        check_dataloaders=False,  # the synthetic loader has num_workers=0
        degradation_threshold=100.0,  # early CUDA steps are slow; no warning wanted here
        summary=False,
    )


def test_sync_check_catches_a_sync(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="synchroniz"):
        fit(tmp_path, [SyncCheckOn(CHECKED, inject_sync=True), SyncCheckOff()])


def test_model_alone_does_not_sync(tmp_path: Path) -> None:
    on = SyncCheckOn(CHECKED)
    fit(tmp_path, [on, SyncCheckOff()])
    assert on.armed == CHECKED


def test_callback_adds_no_sync_outside_windows(tmp_path: Path) -> None:
    on, perf = SyncCheckOn(CHECKED), perf_callback(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(tmp_path, [on, perf, SyncCheckOff()])
    # An instrument that hit the sync error is disabled with a warning instead of raising: that fails here too.
    assert not [str(w.message) for w in caught if issubclass(w.category, PerfWarning)]
    assert on.armed == CHECKED
    assert perf.engine is not None
    assert [p.parent.name for p in perf.engine.exported] == ["window-000010-000011"]

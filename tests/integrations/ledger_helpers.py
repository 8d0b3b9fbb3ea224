"""A Lightning run with planted time for the ledger tests: a sleep before fit, checkpoint sleeps, evaluation sleeps,
one stalled step; the test's own clock readings of each (what the ledger must find)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader

from perf_callbacks import GPUPerfCallback
from tests.integrations.lit_helpers import TinyModel, loader


@dataclass
class Planted:
    """What the test planted and read on its own clock."""

    before_fit_s: float = 0.0
    checkpoint_s: float = 0.0
    evaluation_s: float = 0.0
    stall_s: float = 0.0
    t_callback: float = 0.0  # right before the callback's construction
    t_first_batch: float | None = None  # the first training batch's start
    t_end: float = 0.0  # the fit's teardown reached the callback after ours (ours closed)
    saves_s: float = 0.0  # ModelCheckpoint's saves, whole (the engine's checkpoint range lies inside each)
    validations_s: float = 0.0  # the validation loops, whole, from on_validation_start to on_validation_end
    stalled_step_s: float = 0.0  # the stalled step, whole: its batch's start to its end (its sleep and its work)
    stall_steps: list[int] = field(default_factory=list)


class PlantedModel(TinyModel):
    def __init__(self, planted: Planted, val_sleep: float, stall_at: int | None, stall_s: float) -> None:
        super().__init__()
        self.planted, self.val_sleep, self.stall_at, self.stall_s = planted, val_sleep, stall_at, stall_s

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.t_batch = time.perf_counter()
        if self.planted.t_first_batch is None:
            self.planted.t_first_batch = self.t_batch

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.trainer.global_step - 1 == self.stall_at:  # the step that slept has just stepped its optimizer
            self.planted.stalled_step_s = time.perf_counter() - self.t_batch

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == self.stall_at:
            time.sleep(self.stall_s)
            self.planted.stall_s += self.stall_s
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.val_sleep and not self.trainer.sanity_checking:
            time.sleep(self.val_sleep)
            self.planted.evaluation_s += self.val_sleep
        super().validation_step(batch, batch_idx)


class TimedCheckpoint(ModelCheckpoint):
    """ModelCheckpoint whose saves the test times on its own clock (``trainer.save_checkpoint`` runs inside each)."""

    def __init__(self, planted: Planted, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.planted = planted

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        t0 = time.perf_counter()
        super()._save_checkpoint(trainer, filepath)
        self.planted.saves_s += time.perf_counter() - t0


class EndClock(Callback):
    """Reads the test's clock at the fit's teardown, after the callbacks before it (ours closed there)."""

    def __init__(self, planted: Planted) -> None:
        self.planted = planted

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.planted.t_end = time.perf_counter()


class EvalClock(Callback):
    """Each validation loop on the test's clock, whole (its sleep and whatever the loop itself costs on this machine)."""

    def __init__(self, planted: Planted) -> None:
        self.planted, self.t0 = planted, 0.0

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.t0 = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.planted.validations_s += time.perf_counter() - self.t0


class SlowSave(Callback):
    """A checkpoint that takes ``seconds`` more to save (as a large model's would)."""

    def __init__(self, planted: Planted, seconds: float) -> None:
        self.planted, self.seconds = planted, seconds

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        time.sleep(self.seconds)
        self.planted.checkpoint_s += self.seconds


class Marks(Callback):
    """The test's clock at each step's ``on_train_batch_end``, right before ours logs (the checkpoints run after)."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.at[trainer.global_step] = time.perf_counter()


class SaveTimes(TimedCheckpoint):
    """Each save's start and length on the test's clock."""

    def __init__(self, planted: Planted, **kwargs: Any) -> None:
        super().__init__(planted, **kwargs)
        self.saves: list[tuple[float, float]] = []

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        t0 = time.perf_counter()
        super()._save_checkpoint(trainer, filepath)
        self.saves.append((t0, time.perf_counter() - t0))


def planted_fit(tmp_path: Path, *, steps: int = 12, before_fit_s: float = 0.0, ckpt_s: float = 0.0,
                val_every: int | None = None, val_sleep: float = 0.0, stall_at: int | None = None,
                stall_s: float = 0.0, window: bool = False, ckpt_every: int = 1) -> Planted:
    """Fit the tiny model for ``steps`` steps with what is planted; a profiler window at steps 2-3 if ``window``."""
    planted = Planted(before_fit_s=before_fit_s)
    planted.t_callback = time.perf_counter()
    schedule = {"skip_first": 0 if window else 10_000, "active": 2}
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule=schedule, summary=False, check_dataloaders=False)
    callbacks: list[Callback] = [cb, EndClock(planted), EvalClock(planted)]  # its teardown runs after ours
    if ckpt_s:
        callbacks += [SlowSave(planted, ckpt_s), TimedCheckpoint(planted, dirpath=tmp_path / "ckpt",
                                                                 every_n_train_steps=ckpt_every, save_top_k=-1)]
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=bool(ckpt_s), callbacks=callbacks,
                        num_sanity_val_steps=0, limit_val_batches=1 if val_every else 0,
                        val_check_interval=val_every, check_val_every_n_epoch=None if val_every else 1,
                        default_root_dir=tmp_path)
    model = PlantedModel(planted, val_sleep, stall_at, stall_s)
    data = loader(n=8 * steps)
    if before_fit_s:
        time.sleep(before_fit_s)
    trainer.fit(model, data, val_dataloaders=loader(n=8) if val_every else None)
    return planted


def slow_start(worker_id: int) -> None:
    """A DataLoader worker that takes ``WORKER_START_S`` to start (as one that opens files or a dataset would)."""
    time.sleep(WORKER_START_S)


WORKER_START_S = 0.5


class TimedLoader(DataLoader):  # type: ignore[type-arg]
    """A DataLoader that times, on the test's clock, each epoch's ``iter()`` to its first batch (its workers' start)
    and the ``next()`` that ends the epoch (workers that do not persist are shut down in it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.starts: list[float] = []
        self.ends: list[float] = []

    def __iter__(self) -> Iterator[Any]:
        t0, batches = time.perf_counter(), super().__iter__()
        first = next(batches)
        self.starts.append(time.perf_counter() - t0)
        t0 = 0.0
        try:
            yield first
            while True:
                t0 = time.perf_counter()
                yield next(batches)
                t0 = 0.0
        except StopIteration:  # the epoch's end: workers that do not persist were shut down in that next()
            self.ends.append(time.perf_counter() - t0)
        finally:  # or the loop let go of the epoch's iterator without draining it: its workers stop now
            if len(self.ends) < len(self.starts):
                t0 = time.perf_counter()
                del batches  # the last reference: the iterator's __del__ shuts its workers down
                self.ends.append(time.perf_counter() - t0)


def epochs_fit(tmp_path: Path, *, persistent: bool, epochs: int = 4, steps_per_epoch: int = 4) -> list[float]:
    """Fit ``epochs`` epochs of ``steps_per_epoch`` steps with one DataLoader worker that takes ``WORKER_START_S`` to
    start; returns each epoch's restart on the test's clock: from ``iter()`` to its first batch, and the previous
    epoch's last ``next()`` (its workers' shutdown)."""
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 10_000}, summary=False,
                         check_dataloaders=False)
    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, callbacks=[cb], limit_val_batches=0,
                        default_root_dir=tmp_path)
    data = TimedLoader(loader(n=8 * steps_per_epoch).dataset, batch_size=8, num_workers=1,
                       persistent_workers=persistent, worker_init_fn=slow_start)
    trainer.fit(TinyModel(), data)
    return [start + (data.ends[k - 1] if k else 0.0) for k, start in enumerate(data.starts)]

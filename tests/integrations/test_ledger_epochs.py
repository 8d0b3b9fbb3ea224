"""DataLoader worker start-up at each epoch, outside Lightning: the Accelerate hook's ``iter`` and the transformers
callback's ``on_epoch_begin`` mark the epoch boundaries, as Lightning's ``on_train_epoch_start`` does.

One worker that takes ``WORKER_START_S`` to start, 4 epochs of 4 steps: with ``persistent_workers=False`` each epoch
starts it again, and the ledger's ``worker_startup`` is each epoch's wait for its first batch on the test's own clock;
with persistent workers it is 0.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from torch import nn
from transformers import TrainerCallback

from perf_callbacks import AcceleratePerfHook
from perf_callbacks.analysis.ledger.advice import ledger_advice
from perf_callbacks.analysis.ledger.parts import Ledger
from perf_callbacks.analysis.ledger.text import run_ledgers
from tests.integrations.acc_helpers import data
from tests.integrations.hf_helpers import Samples, callback, make_trainer
from tests.integrations.ledger_helpers import WORKER_START_S, slow_start

EPOCHS, STEPS = 4, 4


def close_to(found: float, planted: float) -> bool:
    return abs(found - planted) <= max(0.05 * planted, 0.05)


def check(led: Ledger, starts: list[float], persistent: bool) -> None:
    if persistent:
        assert led.parts["worker_startup"] == 0 and not [a for a in ledger_advice(led) if a.part == "worker_startup"]
        return
    assert len(starts) == EPOCHS and min(starts) >= WORKER_START_S
    assert close_to(led.parts["worker_startup"], sum(starts)), (led.parts, starts)
    assert led.steps == EPOCHS * STEPS and len(led.spikes) == EPOCHS
    [advice] = [a for a in ledger_advice(led) if a.part == "worker_startup"]
    assert "persistent_workers=True" in advice.text


@pytest.mark.parametrize("persistent", [False, True], ids=["restarted", "persistent"])
def test_accelerate_epochs_that_start_workers_are_worker_start_up(tmp_path: Path, persistent: bool) -> None:
    acc = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    loader = data(4 * STEPS, num_workers=1, persistent_workers=persistent, worker_init_fn=slow_start)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), loader)
    hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 10_000},
                              check_dataloaders=False, degradation_threshold=1e6).register(acc)
    starts: list[float] = []
    ended = 0.0  # the last epoch's final next(), which shuts its workers down
    for _ in range(EPOCHS):
        t0 = time.perf_counter()  # the epoch's iter() to its first batch, on the test's clock
        for i, (x, y) in enumerate(hook.iter(dl)):
            if i == 0:
                starts.append(time.perf_counter() - t0 + ended)
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
            t_last = time.perf_counter()
        ended = time.perf_counter() - t_last
    hook.close()
    [led] = run_ledgers(tmp_path / "perf")
    check(led, starts, persistent)


class SlowStart(Samples):
    """Each worker process takes ``WORKER_START_S`` before its first sample (as one that opens files would)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.started: int | None = None  # the process that started (a new worker copies the parent's None)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.started != os.getpid():
            time.sleep(WORKER_START_S)
            self.started = os.getpid()
        return super().__getitem__(i)


class EpochStarts(TrainerCallback):
    """Each epoch's begin to its first step's begin, on the test's clock."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self._t: float | None = None

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._t = time.perf_counter()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._t is not None:
            self.starts.append(time.perf_counter() - self._t)
            self._t = None


@pytest.mark.parametrize("persistent", [False, True], ids=["restarted", "persistent"])
def test_transformers_epochs_that_start_workers_are_worker_start_up(tmp_path: Path, persistent: bool) -> None:
    epochs = EpochStarts()
    trainer = make_trainer(tmp_path, [callback(tmp_path / "perf", schedule={"skip_first": 10_000}), epochs],
                           max_steps=EPOCHS * STEPS, dataloader_num_workers=1,
                           dataloader_persistent_workers=persistent)
    trainer.train_dataset = SlowStart(4 * STEPS)
    trainer.train()
    [led] = run_ledgers(tmp_path / "perf")
    check(led, epochs.starts, persistent)

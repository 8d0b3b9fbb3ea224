"""The hang watchdog through real Lightning, Accelerate and transformers runs: the user's own code after a step
(``OWN_S``, 3x ``HANG_TIMEOUT``) gets the 10x allowance in every adapter and leaves no folder; a stall of the same
length in a step's forward is still written at 1x."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn
from transformers import TrainerCallback

from perf_callbacks import GPUPerfCallback
from tests.integrations.lit_helpers import TinyModel, loader, trainer

HANG_TIMEOUT = 0.5  # polled every 0.05 s
OWN_S = 3 * HANG_TIMEOUT  # the user's own code: three times the step's 1x (as 3 s at hang_timeout=1), under the 10x


def hang_folders(root: Path) -> list[Path]:
    return list(root.rglob("hang-rank*"))


class SlowBatchEnd(L.Callback):
    """A user's callback, listed before ours (so its hook runs before our step's end), slow once."""

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == 3:
            time.sleep(OWN_S)


def test_lightning_a_callback_after_the_step_that_runs_before_ours_is_own_time(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), hang_timeout=HANG_TIMEOUT, summary=False)
    slow = SlowBatchEnd()
    fit = trainer(tmp_path, [slow, cb], max_steps=5, limit_val_batches=0)
    assert fit.callbacks.index(slow) < fit.callbacks.index(cb)
    fit.fit(TinyModel(), loader(n=64))
    assert fit.global_step == 5
    assert not hang_folders(tmp_path)


class SlowStepEnd(TrainerCallback):
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 3:
            time.sleep(OWN_S)


def test_transformers_an_on_step_end_callback_before_ours_is_own_time(tmp_path: Path) -> None:
    from tests.integrations.hf_helpers import callback, make_trainer

    make_trainer(tmp_path, [SlowStepEnd(), callback(tmp_path / "perf", hang_timeout=HANG_TIMEOUT)], max_steps=5).train()
    assert not hang_folders(tmp_path)


class SleepyLinear(nn.Linear):
    """A forward that stalls ``stall_s`` once, at its ``at``-th call in training mode (a collective that waits)."""

    def __init__(self, at: int | None = None, stall_s: float = 0.0) -> None:
        super().__init__(8, 1)
        self.at, self.stall_s, self.calls = at, stall_s, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
            if self.calls == self.at:
                time.sleep(self.stall_s)
        return super().forward(x)


def accelerate_run(tmp_path: Path, model: nn.Module) -> tuple[Any, Any, Any]:
    from accelerate import Accelerator

    from perf_callbacks import AcceleratePerfHook
    from tests.integrations.acc_helpers import data

    acc = Accelerator(cpu=True)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(32, num_workers=0))
    hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf"), hang_timeout=HANG_TIMEOUT, summary=False).register(acc)
    return acc, hook, (model, opt, dl)


def evaluate(model: nn.Module, seconds: float) -> None:
    """The user's own evaluation: the model in eval mode, then back in training mode."""
    model.eval()
    with torch.no_grad():
        model(torch.zeros(2, 8))
    time.sleep(seconds)
    model.train()


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_own_code_at_the_top_after_the_step_and_after_a_break_is_own_time(tmp_path: Path) -> None:
    acc, hook, (model, opt, dl) = accelerate_run(tmp_path, SleepyLinear())
    for i, (x, y) in enumerate(hook.iter(dl)):
        if i == 2:
            evaluate(model, OWN_S)  # at the top of the body, before the step's forward
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
        if i == 4:
            evaluate(model, OWN_S)  # after the optimizer's step
        if i == 5:
            break
    time.sleep(OWN_S)  # after a `break`, before the hook closes
    hook.close()
    assert hook.optimizer_steps == 6
    assert not hang_folders(tmp_path)


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_a_stall_in_the_forward_is_still_written_at_the_timeout(tmp_path: Path) -> None:
    acc, hook, (model, opt, dl) = accelerate_run(tmp_path, SleepyLinear(at=3, stall_s=OWN_S))
    for x, y in hook.iter(dl):
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
    hook.close()
    (folder,) = hang_folders(tmp_path)
    data = json.loads((folder / "hang.json").read_text())
    assert (data["step"], data["phase"], data["aside"]) == (2, "forward", None)
    assert HANG_TIMEOUT <= data["waited_s"] < OWN_S
    assert data["resumed"] is not None  # steps resumed after it: a stall, and the folder says so

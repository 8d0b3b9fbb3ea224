"""The hang watchdog through a real Lightning fit and Accelerate loop: it runs while training, a long validation or
the user's own code after the loop is no hang, and the thread is gone at the end, leaving no folder."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import lightning as L
import pytest
import torch

from perf_callbacks import GPUPerfCallback
from tests.integrations.lit_helpers import TinyModel, loader, trainer

HANG_TIMEOUT = 1.0
VAL_SLEEP_S = 0.6  # per validation batch: 4 batches, 2.4 s of validation, 2.4x the hang timeout


class SlowValidation(TinyModel):
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        time.sleep(VAL_SLEEP_S)


class SeesTheWatch(L.Callback):
    def __init__(self) -> None:
        self.alive: list[int] = []

    def on_train_batch_end(self, *args: object) -> None:
        self.alive.append(sum(t.name == "perf-callbacks-hang-watch" and t.is_alive() for t in threading.enumerate()))


def test_lightning_starts_and_stops_the_watch_and_a_long_validation_is_no_hang(tmp_path: Path) -> None:
    seen = SeesTheWatch()
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), hang_timeout=HANG_TIMEOUT, summary=False)
    t0 = time.perf_counter()
    trainer(tmp_path, [cb, seen], max_steps=10, val_check_interval=5, limit_val_batches=4).fit(
        SlowValidation(), loader(), loader(n=32)
    )
    assert time.perf_counter() - t0 > 2 * VAL_SLEEP_S * 4  # both validations ran: 4.8 s, 4.8x the timeout
    assert seen.alive == [1] * 10
    assert not any(t.name == "perf-callbacks-hang-watch" for t in threading.enumerate())
    assert not list(tmp_path.rglob("hang-rank*"))


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_starts_and_stops_the_watch_and_own_code_after_the_loop_is_no_hang(tmp_path: Path) -> None:
    from tests.integrations.acc_helpers import setup, train

    acc, hook, parts = setup(tmp_path, hang_timeout=HANG_TIMEOUT, summary=False)
    train(acc, hook, parts)
    assert sum(t.name == "perf-callbacks-hang-watch" and t.is_alive() for t in threading.enumerate()) == 1
    time.sleep(2.5 * HANG_TIMEOUT)  # the user's own evaluation after the loop, before the hook closes
    hook.close()
    assert not any(t.name == "perf-callbacks-hang-watch" for t in threading.enumerate())
    assert not list(tmp_path.rglob("hang-rank*"))

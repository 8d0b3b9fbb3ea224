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
from perf_callbacks.core.engine.engine import PerfEngine
from tests.integrations.lit_helpers import TinyModel, loader, trainer

HANG_TIMEOUT = 1.0
VAL_SLEEP_S = 0.6  # per validation batch: 4 batches, 2.4 s of validation, 2.4x the hang timeout


class SlowValidation(TinyModel):
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        time.sleep(VAL_SLEEP_S)


def watch_thread(engine: PerfEngine | None) -> threading.Thread | None:
    """The engine's own watchdog thread: not a count of all of them, since earlier tests' engines' threads end on
    their own once those engines are collected, at any moment (as in ``tests/core/hang/test_hang.py``)."""
    return engine.hang._thread if engine is not None and engine.hang is not None else None


class SeesTheWatch(L.Callback):
    def __init__(self, cb: GPUPerfCallback) -> None:
        self.cb = cb
        self.seen: list[tuple[threading.Thread | None, bool]] = []  # each step's watch thread, and whether it ran

    def on_train_batch_end(self, *args: object) -> None:
        thread = watch_thread(self.cb.engine)
        self.seen.append((thread, thread is not None and thread.is_alive()))


def test_lightning_starts_and_stops_the_watch_and_a_long_validation_is_no_hang(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), hang_timeout=HANG_TIMEOUT, summary=False)
    seen = SeesTheWatch(cb)
    t0 = time.perf_counter()
    trainer(tmp_path, [cb, seen], max_steps=10, val_check_interval=5, limit_val_batches=4).fit(
        SlowValidation(), loader(), loader(n=32)
    )
    assert time.perf_counter() - t0 > 2 * VAL_SLEEP_S * 4  # both validations ran: 4.8 s, 4.8x the timeout
    thread = seen.seen[0][0]
    assert thread is not None and thread.name == "perf-callbacks-hang-watch"
    assert seen.seen == [(thread, True)] * 10  # one thread, watching through every step
    assert not thread.is_alive()  # the fit's end stopped it
    assert not list(tmp_path.rglob("hang-rank*"))


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_starts_and_stops_the_watch_and_own_code_after_the_loop_is_no_hang(tmp_path: Path) -> None:
    from tests.integrations.acc_helpers import setup, train

    acc, hook, parts = setup(tmp_path, hang_timeout=HANG_TIMEOUT, summary=False)
    train(acc, hook, parts)
    thread = watch_thread(hook.engine)
    assert thread is not None and thread.is_alive()
    time.sleep(2.5 * HANG_TIMEOUT)  # the user's own evaluation after the loop, before the hook closes
    assert thread.is_alive()  # still watching: no hang written meanwhile (checked below)
    hook.close()
    assert not thread.is_alive()
    assert not list(tmp_path.rglob("hang-rank*"))

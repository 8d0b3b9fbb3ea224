"""Everything we install is undone however training ends: the capture signal's handler after a failed run.

Each test installs a handler of its own for ``SIGUSR2`` (our ``capture_signal``), runs a fit that fails, and checks
that its handler, not ours, is installed afterwards, and that the run's threads have stopped (the capture request
poller, the CPU-wait sampler of ``capture_on_anomaly``, the hang watchdog; the job thread is one per process).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch

from perf_callbacks import GPUPerfCallback
from tests.integrations.lit_helpers import TinyModel, loader, trainer

OPTIONS: dict[str, Any] = {"check_dataloaders": False, "hang_timeout": 60, "capture_poll_s": 0.05,
                           "capture_on_anomaly": True}
RUN_THREADS = ("perf-callbacks-capture", "perf-callbacks-wait", "perf-callbacks-hang-watch")


def _theirs(signum: int, frame: FrameType | None) -> None:
    """The user's own handler."""


@pytest.fixture
def user_handler() -> Iterator[Callable[[int, FrameType | None], None]]:
    """The user's SIGUSR2 handler, installed before the run; whatever was there before the test is put back after."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR2, signal.SIGINT)}
    signal.signal(signal.SIGUSR2, _theirs)
    yield _theirs
    for s, handler in saved.items():
        signal.signal(s, handler)


def _undone(handler: Callable[[int, FrameType | None], None]) -> None:
    assert signal.getsignal(signal.SIGUSR2) is handler
    deadline = time.monotonic() + 5.0  # a daemon thread sees its stop event within one poll
    while (alive := [t.name for t in threading.enumerate() if t.name in RUN_THREADS]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive == []


class FailsInSanityCheck(TinyModel):
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        raise ValueError("user error in validation")


class InterruptedAtStep2(TinyModel):
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == 2:
            raise KeyboardInterrupt
        return super().training_step(batch, batch_idx)


LIGHTNING_FAILURES = {  # model, val loader, what fit raises
    "training_step": (lambda: TinyModel(fail_at_step=2), loader, ValueError),
    "sanity_check": (FailsInSanityCheck, loader, ValueError),
    "bad_val_loader": (TinyModel, lambda: [1, 2, 3], TypeError),  # a list of ints is no loader of batches
    "ctrl_c": (InterruptedAtStep2, loader, SystemExit),  # Lightning: sys.exit(1) after Ctrl-C
}


@pytest.mark.parametrize("how", list(LIGHTNING_FAILURES))
def test_lightning_a_failed_fit_puts_the_previous_handler_back(
    tmp_path: Path, how: str, user_handler: Callable[[int, FrameType | None], None]
) -> None:
    model, val, raised = LIGHTNING_FAILURES[how]
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), **OPTIONS)
    t = trainer(tmp_path, [cb], max_steps=6, num_sanity_val_steps=2)
    with pytest.raises(raised):
        t.fit(model(), loader(), val())
    assert cb.engine is not None and cb.engine.captures.requests is not None  # ours was installed
    _undone(user_handler)


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_an_exception_in_the_with_block_puts_the_previous_handler_back(
    tmp_path: Path, user_handler: Callable[[int, FrameType | None], None]
) -> None:
    from tests.integrations.acc_helpers import setup, train

    acc, hook, parts = setup(tmp_path, **OPTIONS)
    assert signal.getsignal(signal.SIGUSR2) is not user_handler  # ours, while the run goes on
    with pytest.raises(ValueError, match="user error at step 2"), hook:
        train(acc, hook, parts, fail_at=2)
    _undone(user_handler)


def test_transformers_an_exception_in_train_puts_the_previous_handler_back(
    tmp_path: Path, user_handler: Callable[[int, FrameType | None], None]
) -> None:
    from tests.integrations.hf_helpers import FailAt, callback, make_trainer

    t = make_trainer(tmp_path, [callback(tmp_path / "perf", **OPTIONS), FailAt(2)])
    with pytest.raises(ValueError, match="user error at step 2"):
        t.train()
    _undone(user_handler)

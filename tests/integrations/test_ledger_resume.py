"""A resumed run's ledger says how many steps (and seconds) it did again: a real Lightning run that checkpoints every 4
steps fails at step 10, and a second run resumes from the checkpoint at step 8 into the same ``output_dir``.

The steps the first run completed after that checkpoint (8 and 9) are redone; their seconds are the first run's, read
on the test's own clock (each step sleeps 0.1 s, from one step's start to the next's).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from perf_callbacks import GPUPerfCallback
from perf_callbacks.analysis.ledger.text import run_ledgers
from perf_callbacks.cli import EXIT_OK, main
from tests.integrations.lit_helpers import TinyModel, loader, trainer

STEP_S = 0.1


class SlowModel(TinyModel):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(STEP_S)
        return super().training_step(batch, batch_idx)


class Starts(Callback):
    """The test's clock at each step's ``on_train_batch_start``."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self.at[trainer.global_step] = time.perf_counter()


def fit(tmp_path: Path, starts: Starts, ckpt_path: Path | None, max_steps: int, fail_at: int | None) -> None:
    """Fit to ``max_steps`` (failing at ``fail_at``); a resumed run profiles steps 11-12 (``report`` reads a trace)."""
    window = {"skip_first": 11, "wait": 0, "warmup": 0, "active": 2} if ckpt_path else {"skip_first": 10_000}
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule=window, summary=False, check_dataloaders=False)
    saves = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=4, save_top_k=-1)
    model = SlowModel(fail_at_step=fail_at)
    trainer(tmp_path, [starts, cb, saves], max_steps=max_steps, enable_checkpointing=True,
            limit_val_batches=0).fit(model, loader(), ckpt_path=str(ckpt_path) if ckpt_path else None)


def test_a_resumed_run_says_how_many_steps_and_seconds_it_did_again(tmp_path: Path,
                                                                       capfd: pytest.CaptureFixture[str]) -> None:
    first = Starts()
    with pytest.raises(ValueError, match="user error at step 10"):  # the first run stops at step 10
        fit(tmp_path, first, None, 20, fail_at=10)
    [ckpt] = (tmp_path / "ckpt").glob("*step=8.ckpt")
    truth = first.at[10] - first.at[8]  # its steps 8 and 9 on the test's clock, from step 8's start to step 10's
    capfd.readouterr()
    fit(tmp_path, Starts(), ckpt, 14, fail_at=None)
    err = capfd.readouterr().err
    [led] = run_ledgers(tmp_path / "perf")  # the latest run: the resumed one
    assert led.steps == 6 and led.resumed is not None
    resumed = led.resumed
    assert (resumed.at_step, resumed.reached, resumed.steps, resumed.closed) == (8, 9, 2, True)
    assert truth >= 2 * STEP_S and abs(resumed.seconds - truth) <= max(0.05 * truth, 0.05), (resumed, truth)
    assert f"resumed at step 8: 2 steps ({resumed.seconds:.3g} s) redone since the checkpoint" in err
    assert main(["report", str(tmp_path / "perf"), "--json"]) == EXIT_OK
    ledger = json.loads(capfd.readouterr().out)["ledger"]
    assert ledger["resumed"] == resumed.to_dict()

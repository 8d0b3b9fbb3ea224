"""The ledger of a real transformers.Trainer run: a sleep before train(), evaluation every 5 steps, a stalled step."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import TrainerCallback

from perf_callbacks.analysis.ledger.text import run_ledgers
from tests.integrations.hf_helpers import Tiny, callback, make_trainer


class Planted(Tiny):
    """Sleeps ``eval_s`` per evaluation batch and ``stall_s`` once, in the 8th training forward."""

    def __init__(self, eval_s: float, stall_s: float) -> None:
        super().__init__()
        self.eval_s, self.stall_s, self.slept_eval, self.forwards = eval_s, stall_s, 0.0, 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        if not self.training:
            time.sleep(self.eval_s)
            self.slept_eval += self.eval_s
        else:
            self.forwards += 1
            if self.forwards == 8:
                time.sleep(self.stall_s)
        return super().forward(x, labels)


class FirstStep(TrainerCallback):
    """The test's clock at the first step's begin and at the end of training (after ours closed)."""

    def __init__(self) -> None:
        self.t: float | None = None
        self.t_end = 0.0

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.t_end = time.perf_counter()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.t is None:
            self.t = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.t_step_end = time.perf_counter()  # an evaluation due at this step starts after the callbacks

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.evaluations = getattr(self, "evaluations", 0.0) + time.perf_counter() - self.t_step_end


def close_to(found: float, planted: float) -> bool:
    return abs(found - planted) <= max(0.05 * planted, 0.05)


def test_start_up_evaluation_and_a_stall_are_their_parts_and_the_parts_add_up(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    first, model = FirstStep(), Planted(eval_s=0.1, stall_s=1.0)
    trainer = make_trainer(tmp_path, [callback(tmp_path / "perf", schedule={"skip_first": 10_000}), first],
                           max_steps=15, eval_steps=5, model=model)
    time.sleep(1.0)
    trainer.train()
    t_end = first.t_end
    [led] = run_ledgers(tmp_path / "perf")
    assert first.t is not None and led.parts["startup"] >= 1.0
    assert close_to(led.parts["startup"], first.t - t0), (led.parts["startup"], first.t - t0)  # the test's clock
    assert model.slept_eval == pytest.approx(0.6)  # 3 evaluations of 2 batches
    whole = first.evaluations  # each evaluation, step end to on_evaluate, on the test's clock (the loop's own time too)
    assert model.slept_eval <= led.parts["evaluation"] <= whole + 0.05, (led.parts, whole)
    assert led.counts["evaluation"] == 3 and led.steps == 15
    assert close_to(led.parts["anomalous"], 1.0), led.parts
    since = led.wall_s - led.parts["startup_before"]
    assert abs(since - (t_end - t0)) <= 0.01 * (t_end - t0), (since, t_end - t0)
    assert abs(led.parts["unaccounted"]) <= 0.01 * since, led.parts

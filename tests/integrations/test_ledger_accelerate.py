"""The ledger of a real Accelerate loop: a sleep before it, evaluation every 5 steps, save_state every step, a stall."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from accelerate import Accelerator
from torch import nn

from perf_callbacks import AcceleratePerfHook
from perf_callbacks.analysis.ledger.text import run_ledgers
from tests.integrations.acc_helpers import data


def close_to(found: float, planted: float) -> bool:
    return abs(found - planted) <= max(0.05 * planted, 0.05)


def test_start_up_evaluation_checkpoints_and_a_stall_are_their_parts_and_the_parts_add_up(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(60, num_workers=0))
    t0 = time.perf_counter()
    hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 10_000},
                              degradation_threshold=1e6).register(acc)
    time.sleep(1.0)
    t_first, evaluation, saves = None, 0.0, 0
    for x, y in hook.iter(dl):
        t_first = t_first or time.perf_counter()
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
        if hook.optimizer_steps == 7:
            time.sleep(1.0)  # a stalled step
        if hook.optimizer_steps % 5 == 0:
            with hook.validation():
                time.sleep(0.2)
                evaluation += 0.2
        acc.save_state(str(tmp_path / "ckpt"))
        saves += 1
    hook.close()
    t_end = time.perf_counter()
    [led] = run_ledgers(tmp_path / "perf")
    assert t_first is not None and led.parts["startup"] >= 1.0 and close_to(led.parts["startup"], t_first - t0)
    assert led.steps == 15 and led.counts == {"evaluation": 3, "checkpoint": saves}
    assert evaluation <= led.parts["evaluation"] and close_to(led.parts["evaluation"], evaluation)
    assert led.parts["checkpoint"] > 0 and close_to(led.parts["anomalous"], 1.0), led.parts
    since = led.wall_s - led.parts["startup_before"]
    assert abs(since - (t_end - t0)) <= 0.01 * (t_end - t0), (since, t_end - t0)
    assert abs(led.parts["unaccounted"]) <= 0.01 * since, led.parts

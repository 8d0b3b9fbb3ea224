"""The engine trained on a real model step by step, as the FLOPs counting sees it; a distilled model among them.

Shared by the FLOPs tests (``tests/core/flops``) and the per-module FLOPs tests (``tests/core/ranges``). The engine
here opens no window (``NO_WINDOWS``) unless asked.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext

NO_WINDOWS = {"skip_first": 10_000}


def make_engine(tmp_path: Path, logged: list | None = None, every: int = 5, **options: object) -> PerfEngine:
    options.setdefault("schedule", NO_WINDOWS)
    cfg = PerfConfig.from_dict({"summary": False, **options})
    ctx = RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=every,
                     log_metrics=(lambda m, s: logged.append((s, m))) if logged is not None else None)
    return PerfEngine(cfg, ctx)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))


Step = Callable[[nn.Module, torch.Tensor], None]


def once(model: nn.Module, x: torch.Tensor) -> None:
    model(x).square().mean().backward()


def train(engine: PerfEngine, model: nn.Module, x: torch.Tensor, steps: int, accumulate: int = 1,
          step_fn: Step = once) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    engine.attach_model(model)
    for step in range(steps):
        for micro in range(accumulate):
            engine.data_start()
            engine.data_end()
            engine.batch_start(step)
            step_fn(model, x)
            last = micro == accumulate - 1
            if last:
                opt.step()
                opt.zero_grad()
            engine.batch_end(last, samples=x.shape[0])


class Distilled(nn.Module):
    """A student trained against a frozen teacher run under ``torch.inference_mode`` (its ops skip autograd)."""

    def __init__(self) -> None:
        super().__init__()
        self.student, self.teacher = mlp(), mlp().requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            target = self.teacher(x)
        return self.student(x) - target.clone()

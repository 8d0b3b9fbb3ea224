"""A tiny model, synthetic data, a Trainer factory and our callback for the transformers adapter tests (no downloads)."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

from perf_callbacks import TransformersPerfCallback

SCHEDULE = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}
# log_min_interval_s 0: every interval, as the tests count them (the floor: test_log_interval_floor.py)
QUIET = {"data_wait_steps": 1000, "degradation_threshold": 1e6, "check_dataloaders": False, "log_min_interval_s": 0}


class Samples(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """``n`` random regression samples as dicts; ``sleep_ms`` per sample imitates a slow ``__getitem__``."""

    def __init__(self, n: int = 96, sleep_ms: float = 0.0) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g)
        self.sleep_s = sleep_ms / 1e3

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return {"x": self.x[i], "labels": self.y[i]}


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        out = self.layer(x)
        return {"loss": nn.functional.mse_loss(out, labels), "logits": out}


class FailAt(TrainerCallback):
    """Raises ``error`` (default ValueError) when optimizer step ``step`` begins."""

    def __init__(self, step: int, error: BaseException | None = None) -> None:
        self.step, self.error = step, error or ValueError(f"user error at step {step}")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            raise self.error


def make_trainer(out: Path, callbacks: list[Any], *, max_steps: int = 8, ga: int = 1, n: int = 96,
                 sleep_ms: float = 0.0, eval_steps: int | None = None, model: nn.Module | None = None,
                 collator: Callable[[list[dict[str, torch.Tensor]]], dict[str, torch.Tensor]] | None = None,
                 **args: Any) -> Trainer:
    """A Trainer of ``model`` (default: :class:`Tiny`) on :class:`Samples`; ``args`` go to ``TrainingArguments``."""
    defaults: dict[str, Any] = {
        "per_device_train_batch_size": 4, "use_cpu": True, "report_to": "none", "logging_steps": 2,
        "save_strategy": "no", "disable_tqdm": True, "dataloader_num_workers": 0,
    }
    if eval_steps is not None:
        defaults.update(eval_strategy="steps", eval_steps=eval_steps, per_device_eval_batch_size=8)
    targs = TrainingArguments(str(out), max_steps=max_steps, gradient_accumulation_steps=ga, **{**defaults, **args})
    return Trainer(Tiny() if model is None else model, targs, train_dataset=Samples(n, sleep_ms),
                   eval_dataset=Samples(16) if eval_steps is not None else None, callbacks=callbacks,
                   data_collator=collator)


def callback(out: Path, **options: Any) -> TransformersPerfCallback:
    return TransformersPerfCallback(**{"output_dir": str(out), "schedule": SCHEDULE, **QUIET, **options})


def trace_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        return list(json.load(f)["traceEvents"])


def profiler_steps(path: Path) -> list[int]:
    return sorted(int(e["name"].split("#")[1]) for e in trace_events(path)
                  if e.get("name", "").startswith("ProfilerStep#"))


def windows(out: Path) -> dict[str, list[str]]:
    """``{window folder: [trace files]}`` of the single run under ``out``."""
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return {w.name: sorted(p.name for p in w.glob("*.gz")) for w in sorted(run.glob("window-*"))}


def phases_by_step(path: Path) -> dict[int, list[str]]:
    """The phase ranges (``perf_callbacks.*`` but ``framework`` and our own ``overhead``) in each ``ProfilerStep#N``."""
    events = trace_events(path)
    ours = sorted((e["ts"], e["name"].split(".", 1)[1]) for e in events
                  if e.get("name", "").startswith("perf_callbacks.") and e.get("ph") == "X")
    out = {}
    for e in events:
        if e.get("name", "").startswith("ProfilerStep#"):
            lo, hi = e["ts"], e["ts"] + e["dur"]
            out[int(e["name"].split("#")[1])] = [name for ts, name in ours if lo <= ts < hi and name not in ("framework", "overhead")]
    return out


def durations_ms(path: Path, name: str) -> list[float]:
    return [e["dur"] / 1e3 for e in trace_events(path) if e.get("name") == f"perf_callbacks.{name}"]

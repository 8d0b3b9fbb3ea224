"""A tiny Accelerate run, its traces and its TensorBoard scalars: shared by the Accelerate adapter's tests.

Also the loops shaped unlike the README's: a plain loop without ``hook.iter()``, an optimizer without torch step hooks.
"""

from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks import AcceleratePerfHook

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}
_g = torch.Generator().manual_seed(0)  # its own generator: importing this module draws nothing from torch's global one
DATA = TensorDataset(torch.randn(64, 8, generator=_g), torch.randn(64, 1, generator=_g))  # for sharding and resume


def data(n: int = 64, **kwargs: Any) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g))
    return DataLoader(ds, batch_size=kwargs.pop("batch_size", 4), num_workers=kwargs.pop("num_workers", 1), **kwargs)


def setup(tmp_path: Path, ga: int = 1, n: int = 64, **options: Any) -> tuple[Accelerator, AcceleratePerfHook, Any]:
    acc = Accelerator(cpu=True, gradient_accumulation_steps=ga)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(n))
    options.setdefault("output_dir", str(tmp_path / "perf"))
    options.setdefault("schedule", SCHEDULE)
    options.setdefault("degradation_threshold", 1e6)
    options.setdefault("log_min_interval_s", 0)  # every interval, as the tests count them (test_log_interval_floor.py)
    hook = AcceleratePerfHook(**options).register(acc)
    return acc, hook, (model, opt, dl)


def train(acc: Accelerator, hook: AcceleratePerfHook, parts: Any, fail_at: int | None = None,
          stop_at: int | None = None) -> None:
    model, opt, dl = parts
    for x, y in hook.iter(dl):
        with acc.accumulate(model):
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
        if fail_at is not None and hook.optimizer_steps == fail_at:
            raise ValueError(f"user error at step {fail_at}")
        if stop_at is not None and hook.optimizer_steps == stop_at and acc.sync_gradients:
            break


def plain_loop(acc: Accelerator, parts: Any, steps: int | None = None) -> None:
    model, opt, dl = parts
    for i, (x, y) in enumerate(dl):  # no hook.iter()
        with acc.accumulate(model):
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
        if steps is not None and i + 1 == steps:
            break


class PlainOptimizer:
    """An optimizer wrapper that is not a torch.optim.Optimizer: no step hooks (like DeepSpeed's)."""

    def __init__(self, params: Any, lr: float = 0.01) -> None:
        self.inner = torch.optim.SGD(params, lr=lr)
        self.param_groups = self.inner.param_groups
        self.state = self.inner.state
        self.defaults = self.inner.defaults

    def step(self, closure: Any = None) -> None:
        self.inner.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


def trace_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        return list(json.load(f)["traceEvents"])


def profiler_steps(path: Path) -> set[int]:
    return {int(e["name"].split("#")[1]) for e in trace_events(path) if e.get("name", "").startswith("ProfilerStep#")}


def spans(path: Path, prefix: str) -> list[dict[str, Any]]:
    return sorted((e for e in trace_events(path) if e.get("name", "").startswith(prefix)), key=lambda e: e["ts"])


def windows(out: Path) -> dict[str, list[str]]:
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return {w.name: sorted(p.name for p in w.glob("*.gz")) for w in sorted(run.glob("window-*"))}


def tb_scalars(logdir: Path) -> dict[str, list[int]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = list(logdir.rglob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events.parent))
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

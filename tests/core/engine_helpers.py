"""Driving the engine by hand, as an adapter would: shared by the engine's tests (``tests/core``) and others.

Also the fakes the tests drive it with: a clock, and a device peak-memory counter (``HostPeak``); an engine that
publishes its windows' summary (``summary_engine``); and what a trace, or another profiler, holds of our spans.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext

SCHEDULE = {"skip_first": 2, "wait": 1, "warmup": 1, "active": 2}  # make_engine's: warm-up at 3, window 4-5


def make_engine(tmp_path: Path, logged: list | None = None, **options: object) -> PerfEngine:
    options.setdefault("summary", False)
    cfg = PerfConfig.from_dict({"schedule": SCHEDULE, **options})
    ctx = RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=5,
                     log_metrics=(lambda m, s: logged.append((s, m))) if logged is not None else None)
    return PerfEngine(cfg, ctx)


def summary_engine(tmp_path: Path, rank: int = 0, **options: object) -> tuple[PerfEngine, list, list]:
    texts: list = []
    scalars: list = []
    cfg = PerfConfig.from_dict({"schedule": SCHEDULE, "summary": True, **options})
    ctx = RunContext(output_dir=tmp_path, run_name="run", rank=rank, world_size=2 if rank else 1,
                     log_every_n_steps=1000, log_summary=lambda m, s: scalars.append((s, m)),
                     log_text=lambda tag, text, s: texts.append((tag, text, s)))
    return PerfEngine(cfg, ctx), texts, scalars


def run_steps(engine: PerfEngine, steps: int, accumulate: int = 1, start: int = 0) -> None:
    x = torch.randn(8, 8, requires_grad=True)
    for step in range(start, start + steps):
        for micro in range(accumulate):
            engine.data_start()
            engine.data_end()
            engine.batch_start(step)
            (x @ x).sum().backward()
            engine.batch_end(stepped=micro == accumulate - 1, samples=8)


def train_mlp(engine: PerfEngine, steps: int = 12, width: int = 32, hidden: int = 64, batch: int = 16,
              attach: bool = False, between: Callable[[int], None] = lambda _: None) -> nn.Module:
    """A real MLP (``width -> hidden -> width``, SGD) trained on CPU through ``engine``, left open; ``attach``: the
    engine gets the model (FLOPs by module, NVTX module ranges); ``between(step)`` runs after each step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if attach:
        engine.attach_model(model)
    x = torch.randn(batch, width)
    for step in range(steps):
        engine.data_start()
        engine.data_end()
        engine.batch_start(step)
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        engine.batch_end(True, batch)
        between(step)
    return model


def trace_events(path: Path) -> list[dict]:
    return json.load(gzip.open(path))["traceEvents"]


def spans(path: Path, name: str) -> list[dict]:
    return [e for e in trace_events(path) if e.get("name") == name]


def ours_in(prof: torch.profiler.profile) -> list[str]:
    return [e.name for e in prof.events() if e.name.startswith("perf_callbacks.")]


def trace_steps(path: Path) -> list[int]:
    return sorted(int(e["name"].split("#")[1]) for e in trace_events(path) if e.get("name", "").startswith("ProfilerStep#"))


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def fake_steps(engine: PerfEngine, clock: FakeClock, steps: int, wait: float, work: float, framework: float = 0.0,
               start: int = 0) -> None:
    for step in range(start, start + steps):
        engine.data_start()
        clock.t += wait  # inside the DataLoader
        engine.data_end()
        engine.batch_start(step)
        clock.t += work
        engine.batch_end(stepped=True, samples=10)
        clock.t += framework  # the framework's own work between batches (logging, a collective...)


MB = 2**20


class HostPeak:
    """A peak counter with the CUDA allocator's semantics (``peak`` since the last reset), driven by the test."""

    def __init__(self) -> None:
        self.current = self.peak = 0
        self.reads: list[int] = []  # the test's step at each read
        self.step = 0

    def alloc(self, mb: int) -> None:
        self.current += mb * MB
        self.peak = max(self.peak, self.current)

    def free(self, mb: int) -> None:
        self.current -= mb * MB

    def read_and_reset(self) -> int:
        self.reads.append(self.step)
        peak, self.peak = self.peak, self.current
        return peak


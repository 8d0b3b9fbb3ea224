"""Driving the engine by hand, as an adapter would: shared by the engine's tests (``tests/core``) and others.

Also the fakes the tests drive it with: a clock, and a device peak-memory counter (``HostPeak``).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext


def make_engine(tmp_path: Path, logged: list | None = None, **options: object) -> PerfEngine:
    options.setdefault("summary", False)
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 2, "wait": 1, "warmup": 1, "active": 2}, **options})
    ctx = RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=5,
                     log_metrics=(lambda m, s: logged.append((s, m))) if logged is not None else None)
    return PerfEngine(cfg, ctx)


def run_steps(engine: PerfEngine, steps: int, accumulate: int = 1, start: int = 0) -> None:
    x = torch.randn(8, 8, requires_grad=True)
    for step in range(start, start + steps):
        for micro in range(accumulate):
            engine.data_start()
            engine.data_end()
            engine.batch_start(step)
            (x @ x).sum().backward()
            engine.batch_end(stepped=micro == accumulate - 1, samples=8)


def trace_events(path: Path) -> list[dict]:
    return json.load(gzip.open(path))["traceEvents"]


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

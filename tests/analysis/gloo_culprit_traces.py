"""Writes real gloo traces of a DDP loop with our phase spans, one rank delayed in one phase or none.

The delay is a sleep the test chooses: in backward (an autograd Function on the slow rank, so DDP launches its
gradient bucket late and the others wait inside their own backward), in data loading (the dataset's ``__getitem__``)
or in the optimizer step. Each trace carries the window's measured load as the engine writes it (the training
thread's run-queue delay, ``perf_callbacks_load``), which the culprit rule reads. The culprit tests' input.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from perf_callbacks.core.spans import enter_span, exit_span
from perf_callbacks.core.timing.worker_load import META_KEY, LoadProbe
from tests.analysis.gloo_traces import free_port

SLOW_RANK = 1
SLEEP_S = 0.03
ACTIVE = 12
PHASES = ("backward", "data_wait", "optimizer_step")
WINDOW = "window-000002-000013"
HEALTHY = "healthy"


class _Sleep(torch.autograd.Function):
    """Identity whose backward sleeps ``s`` seconds: a rank slow in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, s: float) -> torch.Tensor:
        ctx.s = s
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        time.sleep(ctx.s)
        return grad, None


class _Data(torch.utils.data.Dataset[torch.Tensor]):
    def __init__(self, n: int, sleep_s: float) -> None:
        self.x, self.sleep_s = torch.randn(n, 32), sleep_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.sleep_s and i % 8 == 0:  # once a batch of 8
            time.sleep(self.sleep_s)
        return self.x[i]


def _worker(rank: int, world: int, port: int, out: str, phases: list[str], sleep_s: float, active: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    for phase in phases:
        _window(rank, Path(out) / (phase or HEALTHY) / WINDOW, phase, sleep_s, active)
    dist.barrier()
    dist.destroy_process_group()


def _window(rank: int, target: Path, phase: str, sleep_s: float, active: int) -> None:
    torch.manual_seed(0)
    slow = {p: sleep_s if rank == SLOW_RANK and p == phase else 0.0 for p in PHASES}
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = iter(torch.utils.data.DataLoader(_Data(8 * (active + 2), slow["data_wait"]), batch_size=8))
    sched = torch.profiler.schedule(wait=1, warmup=1, active=active, repeat=1)
    probe, mark = LoadProbe(num_workers=0), None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched) as prof:
        for i in range(active + 2):
            mark = probe.mark() if i == 2 else mark  # the first recorded step (after wait and warmup)
            span = enter_span("perf_callbacks.data_wait")
            x = next(loader)
            exit_span(span)
            span = enter_span("perf_callbacks.forward")
            loss = _Sleep.apply(model(x), slow["backward"]).square().mean()
            exit_span(span)
            span = enter_span("perf_callbacks.backward")
            loss.backward()
            exit_span(span)
            span = enter_span("perf_callbacks.optimizer_step")
            opt.step()
            opt.zero_grad()
            if slow["optimizer_step"]:
                time.sleep(slow["optimizer_step"])
            exit_span(span)
            prof.step()
    load = probe.since(mark).meta() if mark is not None else None
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"rank{rank}.pt.trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, META_KEY: load}))


def write_traces(out: Path, phases: tuple[str, ...] = ("",), world: int = 2, sleep_s: float = SLEEP_S,
                 active: int = ACTIVE) -> dict[str, Path]:
    """Runs ``world`` gloo ranks once, one profiled window per phase in ``phases``, in which rank ``SLOW_RANK``
    sleeps ``sleep_s`` a step in that phase ("": a healthy window).

    Returns each phase's window folder (``out/<phase>/WINDOW``, ``out/healthy/WINDOW`` for "") by phase.
    """
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(world, free_port(), str(out), list(phases), sleep_s, active), nprocs=world, join=True)
    return {p: out / (p or HEALTHY) / WINDOW for p in phases}


if __name__ == "__main__":
    print(write_traces(Path(sys.argv[1]), tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else ("",),
                       int(sys.argv[3]) if len(sys.argv) > 3 else 2))

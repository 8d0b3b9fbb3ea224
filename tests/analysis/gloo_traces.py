"""Writes real 2-rank CPU traces (gloo), with one rank slowed or none: the straggler tests' input."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SLOW_RANK = 1
SLEEP_S = 0.1  # far above what a loaded machine adds to a step (a few to tens of ms); 20 ms: test_stragglers.py
ACTIVE = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, out: str, sleep_s: float, active: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [torch.randn(16, 64) for _ in range(4)]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16 * (active + 2), 64)),
                                         batch_size=16)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=active, repeat=1)
    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts, schedule=sched) as prof:
        for step, (x,) in zip(range(active + 2), loader, strict=False):
            loss = model(x + data[step % 4]).square().mean()
            loss.backward()
            if rank == SLOW_RANK and sleep_s:
                time.sleep(sleep_s)
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
            prof.step()
    prof.export_chrome_trace(str(Path(out) / f"rank{rank}.pt.trace.json"))
    dist.barrier()
    dist.destroy_process_group()


def write_traces(out: Path, world: int = 2, sleep_s: float = SLEEP_S, active: int = ACTIVE) -> Path:
    """Runs ``world`` gloo ranks for ``active`` profiled steps and writes ``rank{R}.pt.trace.json`` into ``out``.

    Rank ``SLOW_RANK`` sleeps ``sleep_s`` before its all_reduce each step (0: a healthy run).
    """
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(world, free_port(), str(out), sleep_s, active), nprocs=world, join=True)
    return out


if __name__ == "__main__":
    write_traces(Path(sys.argv[1]), sleep_s=float(sys.argv[2]) if len(sys.argv) > 2 else SLEEP_S,
                 active=int(sys.argv[3]) if len(sys.argv) > 3 else ACTIVE)

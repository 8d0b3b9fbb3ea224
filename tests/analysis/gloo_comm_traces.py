"""Writes real 2-rank CPU traces (gloo) with all_reduce and broadcast: one window without shapes, one with
``record_shapes=True`` and ``profile_memory=True`` (the collective and memory figures' input)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.analysis.gloo_traces import free_port

ACTIVE = 3
PLAIN, SHAPED = "plain", "shaped"
"""The two window folders: without and with record_shapes/profile_memory."""


def _worker(rank: int, world: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32 * (ACTIVE + 2), 256)),
                                         batch_size=32)
    for folder, extra in ((PLAIN, {}), (SHAPED, {"record_shapes": True, "profile_memory": True})):
        sched = torch.profiler.schedule(wait=1, warmup=1, active=ACTIVE, repeat=1)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                    **extra) as prof:  # type: ignore[arg-type]
            for _, (x,) in zip(range(ACTIVE + 2), loader, strict=False):
                model(x).square().mean().backward()
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                flag = torch.zeros(1000)
                dist.broadcast(flag, src=0)
                opt.step()
                opt.zero_grad()
                prof.step()
        target = Path(out) / folder / "window-000002-000004"
        target.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(target / f"rank{rank}.pt.trace.json"))
    dist.barrier()
    dist.destroy_process_group()


def write_traces(out: Path, world: int = 2) -> Path:
    """Runs ``world`` gloo ranks; writes ``out/plain/window-*/rank{R}.pt.trace.json`` and ``out/shaped/...``."""
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(world, free_port(), str(out)), nprocs=world, join=True)
    return out


if __name__ == "__main__":
    write_traces(Path(sys.argv[1]))

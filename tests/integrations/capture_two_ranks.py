"""Two Accelerate processes (gloo, CPU, DDP); rank 0 asks for a window with ``perf-callbacks capture`` at step 10.

Rank 1 is slower per step (a 20 ms sleep; DDP's all-reduce makes rank 0 wait for it), and neither rank holds its step
for the request: each rank's request thread sees it at its own time, and both open at the step they agree on.

``python -m tests.integrations.capture_two_ranks OUT``: run by ``test_capture.py``.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks import AcceleratePerfHook
from perf_callbacks.cli import main as cli

SCHEDULE = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}
SLOW_S = 0.02  # rank 1's extra time per step: at most 50 steps a second, so the agreed step is within 18 steps


def _rank_main(rank: int, out: Path, port: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    acc = Accelerator(cpu=True)
    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(320, 8, generator=g), torch.randn(320, 1, generator=g)), batch_size=4)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data)
    hook = AcceleratePerfHook(output_dir=str(out / "perf"), schedule=SCHEDULE, log_every_n_steps=10,
                              degradation_threshold=1e6, check_dataloaders=False, capture_poll_s=0.05)
    with hook.register(acc):
        for x, y in hook.iter(dl):
            if hook.optimizer_steps == 10 and rank == 0:
                cli(["capture", str(out / "perf"), "--steps", "2"])
            if rank == 1:
                time.sleep(SLOW_S)
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    torch.multiprocessing.start_processes(_rank_main, args=(Path(sys.argv[1]), _free_port()), nprocs=2,
                                          start_method="fork")

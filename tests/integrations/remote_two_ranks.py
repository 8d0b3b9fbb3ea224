"""Two Accelerate processes (gloo, CPU) writing to a local output_dir, then to ``s3://perf-ddp/perf``.

``python -m tests.integrations.remote_two_ranks OUT ENDPOINT``: run by ``test_remote_output.py``, which serves moto.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks import AcceleratePerfHook

SCHEDULE = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}


def _rank_main(rank: int, out: Path, endpoint: str, port: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    acc = Accelerator(cpu=True)
    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)), batch_size=4)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data)
    options = {"client_kwargs": {"endpoint_url": endpoint}}
    for output_dir in (str(out / "local"), "s3://perf-ddp/perf"):
        hook = AcceleratePerfHook(output_dir=output_dir, storage_options=options, schedule=SCHEDULE,
                                  log_every_n_steps=2, degradation_threshold=1e6, check_dataloaders=False)
        with hook.register(acc):
            for x, y in hook.iter(dl):
                acc.backward(nn.functional.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
        (out / f"rank{rank}.steps").write_text(str(hook.optimizer_steps))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    torch.multiprocessing.start_processes(_rank_main, args=(Path(sys.argv[1]), sys.argv[2], _free_port()), nprocs=2,
                                          start_method="fork")

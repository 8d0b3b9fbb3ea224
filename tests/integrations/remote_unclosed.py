"""An Accelerate loop whose hook is never closed (no ``close()``, no ``with``), writing to an ``s3://`` URL.

``python -m tests.integrations.remote_unclosed URL ENDPOINT ACTIVE``: run by ``test_remote_output.py``, which serves moto.
Eight steps (0-7); the window starts at step 3 and records ACTIVE steps (2: it ends at step 4; 10: it is still open
when the loop ends). The process ends with the hook open: the window and the rest of the run folder are flushed and
uploaded at exit.
"""

from __future__ import annotations

import sys

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks import AcceleratePerfHook


def main(url: str, endpoint: str, active: int) -> None:
    acc = Accelerator(cpu=True)
    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)), batch_size=4)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data)
    hook = AcceleratePerfHook(output_dir=url, storage_options={
        "client_kwargs": {"endpoint_url": endpoint}}, schedule={"skip_first": 2, "wait": 0, "warmup": 1,
                                                                "active": active},
        log_every_n_steps=2, degradation_threshold=1e6, check_dataloaders=False)
    hook.register(acc)
    for x, y in hook.iter(dl):
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
    # no hook.close(): the interpreter's exit closes it


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))

"""Train a small MLP on synthetic data with GPUPerfCallback: CPU by default, the GPU when there is one.

    python examples/lightning/train.py                      # defaults
    python examples/lightning/train.py --num-workers 0      # provoke the input-pipeline warning
    python examples/lightning/train.py --config examples/lightning/perf.yaml

Prints one line per profiling window (its verdict; the whole summary is in summary.txt) and where the traces are.
"""

from __future__ import annotations

import argparse
import time

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from perf_callbacks import GPUPerfCallback


class SyntheticDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random features and labels; ``work_ms`` of CPU work per sample imitates decoding/augmentation, ``io_ms`` of
    waiting per sample (a sleep) imitates reading from slow storage."""

    def __init__(self, n: int = 4096, dim: int = 256, classes: int = 10, work_ms: float = 0.0,
                 io_ms: float = 0.0) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.work_s, self.io_s = work_ms / 1e3, io_ms / 1e3

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.work_s:
            end = time.perf_counter() + self.work_s
            while time.perf_counter() < end:
                pass
        if self.io_s:
            time.sleep(self.io_s)
        return self.x[i], self.y[i]


class MLP(L.LightningModule):
    def __init__(self, dim: int = 256, hidden: int = 1024, classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, classes))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--work-ms", type=float, default=0.0, help="CPU work per sample in the dataset")
    p.add_argument("--io-ms", type=float, default=0.0, help="waiting per sample in the dataset (slow storage)")
    p.add_argument("--config", help="a perf-callbacks YAML file (same keys as GPUPerfCallback)")
    p.add_argument("--root", default="lightning_logs_example")
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    dataset = SyntheticDataset(work_ms=args.work_ms, io_ms=args.io_ms)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.num_workers, pin_memory=cuda, persistent_workers=args.num_workers > 0)
    val = DataLoader(SyntheticDataset(n=256), batch_size=args.batch_size, num_workers=0)
    callback = (GPUPerfCallback.from_yaml(args.config) if args.config
                else GPUPerfCallback(schedule={"skip_first": 10, "wait": 1, "warmup": 1, "active": 3, "repeat": 2}))
    trainer = L.Trainer(
        max_steps=args.max_steps,
        accelerator="gpu" if cuda else "cpu",
        devices=1,
        precision="bf16-mixed" if cuda else "32-true",
        callbacks=[callback],
        default_root_dir=args.root,
        log_every_n_steps=10,
        val_check_interval=20,
        enable_progress_bar=False,
    )
    trainer.fit(MLP(), loader, val)
    engine = callback.engine
    if engine is not None and engine.exported:
        print("traces:")
        for path in engine.exported:
            print(f"  {engine.locate(path)}")  # its URL once uploaded to a remote output_dir
        print("open them in https://ui.perfetto.dev or chrome://tracing, or run: "
              f"perf-callbacks report {engine.locate(engine.layout.run_dir)}")
    print(f"TensorBoard: tensorboard --logdir {trainer.log_dir}")


if __name__ == "__main__":
    main()

"""Train a small MLP on synthetic data with ``transformers.Trainer`` and TransformersPerfCallback.

CPU by default, the GPU when there is one; nothing is downloaded (the model is defined here).

    python examples/transformers/train.py                          # defaults
    python examples/transformers/train.py --num-workers 0          # provoke the DataLoader warning
    python examples/transformers/train.py --config examples/transformers/perf.yaml
    python examples/transformers/train.py --report-to tensorboard  # metrics through the Trainer's TensorBoard
    torchrun --nproc_per_node 2 examples/transformers/train.py     # 2 CPU processes (gloo), one trace per rank

Prints one line per profiling window (its verdict; the whole summary is in summary.txt) and where the traces are.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from perf_callbacks import TransformersPerfCallback


class SyntheticDataset(Dataset[dict[str, torch.Tensor]]):
    """Random features and labels; ``work_ms`` of CPU work per sample imitates decoding/augmentation."""

    def __init__(self, n: int = 8192, dim: int = 256, classes: int = 10, work_ms: float = 0.0) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.work_s = work_ms / 1e3

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.work_s:
            end = time.perf_counter() + self.work_s
            while time.perf_counter() < end:
                pass
        return {"features": self.x[i], "labels": self.y[i]}


class MLPClassifier(nn.Module):
    """A plain ``nn.Module`` the Trainer can train: it takes the batch's keys and returns ``loss`` and ``logits``."""

    def __init__(self, dim: int = 256, hidden: int = 1024, classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, classes))

    def forward(self, features: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.net(features)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-steps", type=int, default=40, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64, help="per device")
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--work-ms", type=float, default=0.0, help="CPU work per sample in the dataset")
    p.add_argument("--config", help="a perf-callbacks YAML file (same keys as GPUPerfCallback)")
    p.add_argument("--report-to", default="none", help="TrainingArguments.report_to (e.g. tensorboard, wandb)")
    p.add_argument("--output-dir", default="transformers_example")
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        eval_strategy="steps",
        eval_steps=20,
        per_device_eval_batch_size=256,
        logging_steps=10,
        save_strategy="no",
        dataloader_num_workers=args.num_workers,
        dataloader_pin_memory=cuda,
        dataloader_persistent_workers=args.num_workers > 0,
        bf16=cuda and torch.cuda.is_bf16_supported(),
        use_cpu=not cuda,
        report_to=args.report_to,
        disable_tqdm=True,
        ddp_find_unused_parameters=False,  # every parameter is used: skip DDP's extra graph traversal
    )
    callback = (TransformersPerfCallback.from_yaml(args.config) if args.config
                else TransformersPerfCallback(schedule={"skip_first": 10, "wait": 1, "warmup": 1, "active": 3,
                                                        "repeat": 2}))
    trainer = Trainer(MLPClassifier(), training_args, train_dataset=SyntheticDataset(work_ms=args.work_ms),
                      eval_dataset=SyntheticDataset(n=512), callbacks=[callback])  # the one added argument
    trainer.train()

    engine = callback.engine
    if trainer.is_world_process_zero() and engine is not None:
        if engine.exported:
            print("traces:")
            for path in engine.exported:
                print(f"  {engine.locate(path)}")  # its URL once uploaded to a remote output_dir
            run_dir = engine.locate(engine.layout.run_dir)
            print(f"open them in https://ui.perfetto.dev, or run: perf-callbacks report {run_dir}")
        logdir = engine.locate(engine.layout.run_dir) if args.report_to == "none" else args.output_dir
        print(f"TensorBoard: tensorboard --logdir {logdir}")


if __name__ == "__main__":
    main()

"""Train a small MLP on synthetic data with AcceleratePerfHook: CPU by default, the GPU when there is one.

    python examples/accelerate/train.py                          # defaults
    python examples/accelerate/train.py --num-workers 0          # provoke the input-pipeline warning
    python examples/accelerate/train.py --config examples/accelerate/perf.yaml
    torchrun --nproc_per_node 2 examples/accelerate/train.py     # 2 CPU processes (gloo), one trace per rank
    accelerate launch --multi_gpu --num_processes 2 examples/accelerate/train.py   # 2 GPUs

(``accelerate launch --cpu --num_processes 2`` starts a single process unless MPI is set up; use torchrun on CPU.)

Prints one line per profiling window (its verdict; the whole summary is in summary.txt) and where the traces are.
"""

from __future__ import annotations

import argparse
import time

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
from torch import nn
from torch.utils.data import DataLoader, Dataset

from perf_callbacks import AcceleratePerfHook


class SyntheticDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random features and labels; ``work_ms`` of CPU work per sample imitates decoding/augmentation."""

    def __init__(self, n: int = 8192, dim: int = 256, classes: int = 10, work_ms: float = 0.0) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.work_s = work_ms / 1e3

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.work_s:
            end = time.perf_counter() + self.work_s
            while time.perf_counter() < end:
                pass
        return self.x[i], self.y[i]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-steps", type=int, default=40, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--work-ms", type=float, default=0.0, help="CPU work per sample in the dataset")
    p.add_argument("--config", help="a perf-callbacks YAML file (same keys as GPUPerfCallback)")
    p.add_argument("--project-dir", default="accelerate_example")
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    accelerator = Accelerator(
        cpu=not cuda,
        mixed_precision="bf16" if cuda else "no",
        gradient_accumulation_steps=args.grad_accum,
        project_config=ProjectConfiguration(project_dir=args.project_dir),
    )
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(SyntheticDataset(work_ms=args.work_ms), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.num_workers, pin_memory=cuda, persistent_workers=args.num_workers > 0)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    hook = (AcceleratePerfHook.from_yaml(args.config) if args.config
            else AcceleratePerfHook(schedule={"skip_first": 10, "wait": 1, "warmup": 1, "active": 3, "repeat": 2},
                                    log_every_n_steps=10))
    with hook.register(accelerator):  # after prepare(); the with block flushes traces even on an exception
        while hook.optimizer_steps < args.max_steps:
            for x, y in hook.iter(loader):  # times the data wait (see the AcceleratePerfHook docs)
                with accelerator.accumulate(model):
                    loss = nn.functional.cross_entropy(model(x), y)
                    accelerator.backward(loss)  # the "backward" phase range
                    optimizer.step()  # counted by the hook; drives the profiling schedule
                    optimizer.zero_grad()
                if hook.optimizer_steps >= args.max_steps:
                    break

    engine = hook.engine
    if accelerator.is_main_process and engine is not None:
        if engine.exported:
            print("traces:")
            for path in engine.exported:
                print(f"  {engine.locate(path)}")  # its URL once uploaded to a remote output_dir
            run_dir = engine.locate(engine.layout.run_dir)
            print(f"open them in https://ui.perfetto.dev, or run: perf-callbacks report {run_dir}")
        print(f"TensorBoard: tensorboard --logdir {engine.locate(engine.layout.run_dir)}")
    accelerator.end_training()


if __name__ == "__main__":
    main()

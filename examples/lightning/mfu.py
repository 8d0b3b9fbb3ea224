"""MFU and where the rest goes, on a small transformer encoder: CPU by default, the GPU (bf16) when there is one.

    python examples/lightning/mfu.py --peak-tflops 0.33   # a CPU has no peak in Lightning's table: give it
    python examples/lightning/mfu.py                      # a GPU that Lightning's table knows: its bf16 peak

The FLOPs of one optimizer step are counted on step 0 with ``FlopCounterMode``; the window summary prints the MFU
and the gap by cause (a loader that spends ``--work-ms`` per sample shows up as ``input``).
"""

from __future__ import annotations

import argparse
import time

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from perf_callbacks import GPUPerfCallback


class Sequences(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random sequences and labels; ``work_ms`` of CPU work per sample imitates decoding."""

    def __init__(self, n: int = 4096, length: int = 64, dim: int = 128, work_ms: float = 0.5) -> None:
        self.n, self.length, self.dim, self.work_s = n, length, dim, work_ms / 1e3

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = time.perf_counter() + self.work_s
        while time.perf_counter() < end:
            pass
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.length, self.dim, generator=g), torch.randint(0, 10, (), generator=g)


class Encoder(L.LightningModule):
    def __init__(self, dim: int = 128, layers: int = 2) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, batch_first=True, dropout=0.0)
        self.body, self.head = nn.TransformerEncoder(layer, layers), nn.Linear(dim, 10)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.head(self.body(x).mean(1)), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's peak TFLOP/s (dense)")
    parser.add_argument("--work-ms", type=float, default=0.5, help="CPU work per sample in the loader")
    parser.add_argument("--output-dir", default="perf")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    callback = GPUPerfCallback(output_dir=args.output_dir, peak_tflops=args.peak_tflops, check_dataloaders=False,
                               schedule={"skip_first": 8, "wait": 1, "warmup": 1, "active": 4})
    trainer = L.Trainer(max_steps=16, accelerator="gpu" if cuda else "cpu", devices=1,
                        precision="bf16-mixed" if cuda else "32-true", callbacks=[callback], logger=False,
                        enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    trainer.fit(Encoder(), DataLoader(Sequences(work_ms=args.work_ms), batch_size=16, num_workers=0))


if __name__ == "__main__":
    main()

"""A model of two identical blocks after a stem (so that both blocks' inputs need gradients): equal work per block."""

from __future__ import annotations

import torch


class Block(torch.nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


class TwoBlocks(torch.nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.stem = torch.nn.Linear(d, d)
        self.blocks = torch.nn.ModuleList([Block(d), Block(d)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return x


def block_flops(batch: int, d: int) -> int:
    """FLOPs of one block's forward and backward as FlopCounterMode counts them: its two matrix products, each
    ``2*batch*in*out`` forward and twice that backward (input and weight gradients); bias, ReLU and the sum uncounted."""
    return 3 * 2 * batch * (d * 4 * d + 4 * d * d)


def hooks_on(model: torch.nn.Module) -> int:
    """Forward and backward hooks registered on the modules of ``model``."""
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) + len(m._backward_hooks)
               + len(m._backward_pre_hooks) for m in model.modules())


def global_hooks() -> int:
    """Module hooks registered for every module (``register_module_forward_hook`` and kin)."""
    from torch.nn.modules import module as mod

    return (len(mod._global_forward_pre_hooks) + len(mod._global_forward_hooks) + len(mod._global_backward_hooks)
            + len(mod._global_backward_pre_hooks))

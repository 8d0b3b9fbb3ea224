"""A LightningModule that runs out of memory where a real one would: shared by the out-of-memory tests.

The OOM is ``torch.OutOfMemoryError`` raised in ``training_step``, autograd's backward, the optimizer step or
validation; ``ddp_fit.py --oom`` and the remote-output tests use the model too.
"""

from __future__ import annotations

from typing import Any

import torch

from perf_callbacks.core.memory.sampler import OutOfMemoryError
from tests.integrations.lit_helpers import TinyModel

MESSAGE = "CUDA out of memory. Tried to allocate 2.00 GiB"


class RaiseInBackward(torch.autograd.Function):
    """Identity forward; its backward raises the given error (autograd's engine thread hands it back unchanged)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, error: BaseException) -> torch.Tensor:
        ctx.error = error
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        raise ctx.error


class OOMModel(TinyModel):
    """Raises ``self.error`` at step ``at`` in ``where``: forward, backward, optimizer_step or validation."""

    def __init__(self, where: str, at: int = 3) -> None:
        super().__init__()
        self.where, self.at, self.error = where, at, OutOfMemoryError(MESSAGE)

    def _fire(self, where: str) -> bool:
        return self.where == where and self.trainer.global_step == self.at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self._fire("forward"):
            raise self.error
        loss = super().training_step(batch, batch_idx)
        return RaiseInBackward.apply(loss, self.error) if self._fire("backward") else loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.where == "validation":
            raise self.error

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return FailingSGD(self.parameters(), lr=0.1, fire=lambda: self._fire("optimizer_step"), error=self.error)


class FailingSGD(torch.optim.SGD):
    """SGD whose update raises when ``fire()`` says so (after Lightning's closure: forward and backward ran)."""

    def __init__(self, params: Any, lr: float, fire: Any, error: BaseException) -> None:
        super().__init__(params, lr=lr, momentum=0.9)  # momentum: optimizer state in the OOM summary
        self.fire, self.error = fire, error

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = super().step(closure)
        if self.fire():
            raise self.error
        return loss

"""The FLOP counter's compute dtype is the one that carried most of the FLOPs, not the one of most ops."""

from __future__ import annotations

import torch

from perf_callbacks.core.flops.count import StepCounter


def test_the_dtype_is_that_of_most_flops_not_of_most_ops() -> None:
    """One float32 matmul of 2 x 64^3 FLOPs, three bfloat16 ones of 2 x 8^3 each."""
    counter = StepCounter()
    counter.start()
    _ = torch.randn(64, 64) @ torch.randn(64, 64)
    for _ in range(3):
        _ = torch.randn(8, 8, dtype=torch.bfloat16) @ torch.randn(8, 8, dtype=torch.bfloat16)
    assert counter.stop()
    assert counter.total == 2 * 64**3 + 3 * 2 * 8**3
    assert counter.dtype is torch.float32
    assert counter.by_dtype == {torch.float32: 2 * 64**3, torch.bfloat16: 3 * 2 * 8**3}

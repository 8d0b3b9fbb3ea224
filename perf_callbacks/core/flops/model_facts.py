"""What a model says of itself for the FLOPs and the peak: its ``flops_per_batch`` attribute, its parameters' dtype."""

from __future__ import annotations

from collections import Counter

import torch


def flops_per_batch(model: torch.nn.Module | None) -> float | None:
    """The model's ``flops_per_batch`` attribute (ThroughputMonitor's convention), when it is a positive number.

    Example:
        >>> model = torch.nn.Linear(2, 2)
        >>> model.flops_per_batch = 8
        >>> flops_per_batch(model), flops_per_batch(torch.nn.Linear(2, 2))
        (8.0, None)
    """
    value = getattr(model, "flops_per_batch", None) if model is not None else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


def param_dtype(model: torch.nn.Module | None) -> torch.dtype | None:
    """The floating-point dtype that holds most of the model's parameters, None without a model or such parameters.

    Example:
        >>> param_dtype(torch.nn.Linear(2, 2).to(torch.bfloat16)), param_dtype(None)
        (torch.bfloat16, None)
    """
    if model is None:
        return None
    sizes: Counter[torch.dtype] = Counter()
    for p in model.parameters():
        if p.is_floating_point():
            sizes[p.dtype] += p.numel()
    return sizes.most_common(1)[0][0] if sizes else None

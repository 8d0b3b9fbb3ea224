"""What a model says of itself for the FLOPs and the peak: its ``flops_per_batch`` attribute, its parameters' dtype."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import torch

from perf_callbacks._config_checks import as_real


def flops_per_batch(model: torch.nn.Module | None, refuse: Callable[[str], None] | None = None) -> float | None:
    """The model's ``flops_per_batch`` attribute (ThroughputMonitor's convention), None when it has none.

    A number of any numeric type (a Python, numpy or 0-d tensor number) counts; one that is not a finite number > 0
    is ignored (None), and ``refuse`` gets one line that names it.

    Example:
        >>> model = torch.nn.Linear(2, 2)
        >>> model.flops_per_batch = torch.tensor(8)
        >>> flops_per_batch(model), flops_per_batch(torch.nn.Linear(2, 2))
        (8.0, None)
    """
    value = getattr(model, "flops_per_batch", None) if model is not None else None
    if value is None:
        return None
    number = as_real(value)
    if number is None or not math.isfinite(number) or number <= 0:
        if refuse is not None:
            refuse(f"the model's flops_per_batch must be a finite number > 0, got {value!r} ({type(value).__name__}): "
                   "it is ignored, and the FLOPs are measured as without it (or set flops_per_step)")
        return None
    return number


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

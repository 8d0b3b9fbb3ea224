"""Counting the model FLOPs of one training step with ``torch.utils.flop_counter.FlopCounterMode``.

:class:`StepCounter` is a ``FlopCounterMode`` that is entered in one hook and left in another (the engine's
``batch_start`` of a step's first micro-batch and the ``batch_end`` that completes its optimizer step), so that it
sees the forward and backward of every micro-batch of that step, however the framework runs them. It differs from
the plain ``FlopCounterMode`` in three ways:

- no per-module breakdown: the plain one installs global module hooks (and gradient hooks on activations) to
  attribute FLOPs to modules, which the total does not need;
- formulas for the CPU flash-attention ops (``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward),
  the same as torch's for the CUDA flash-attention ops, which torch's registry lacks (see :func:`extra_formulas`);
- it records the dtype of each counted op's first input (the compute dtype: bf16 under autocast, for example) and
  the ops that look like matrix math but have no FLOP formula (an LSTM, a custom attention kernel), whose work the
  count would miss.

Entering it changes no numerics: each op runs as it would, with the same inputs; only ops without a formula that
have a composite decomposition run decomposed, exactly as ``FlopCounterMode`` runs them.

Example:
    >>> import torch
    >>> counter = StepCounter()
    >>> counter.start()
    >>> _ = torch.randn(4, 8) @ torch.randn(8, 2)
    >>> counter.stop()
    True
    >>> counter.total, counter.dtype
    (128, torch.float32)
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

_MATH_LIKE = re.compile(r"mm|matmul|conv|attention|attn|linear|einsum|rnn|lstm|gru|triton", re.IGNORECASE)
"""Op names that suggest heavy math: run without a FLOP formula, the count would miss their work."""
_CPU_TWINS = {
    "_scaled_dot_product_flash_attention_for_cpu": "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "_scaled_dot_product_flash_attention_backward",
}


def extra_formulas() -> dict[Any, Any]:
    """FLOP formulas for ops torch's registry lacks, keyed like ``custom_mapping`` of ``FlopCounterMode``.

    The CPU flash-attention ops take the same leading arguments (query, key, value; grad_out first in the backward)
    as the CUDA ones, so torch's own formulas apply. Pass this to a ``FlopCounterMode`` to count as we count.
    """
    out: dict[Any, Any] = {}
    for name, twin in _CPU_TWINS.items():
        op, like = getattr(torch.ops.aten, name, None), getattr(torch.ops.aten, twin, None)
        if op is not None and like in flop_registry:
            out[op] = _raw(flop_registry[like])
    return out


class StepCounter(FlopCounterMode):
    """A ``FlopCounterMode`` without module tracking, that also records the compute dtype and uncounted math ops."""

    def __init__(self) -> None:
        super().__init__(display=False, custom_mapping=extra_formulas())
        self.mod_tracker = _NoModules()  # type: ignore[assignment]
        self.by_dtype: dict[torch.dtype, int] = defaultdict(int)
        self.uncounted: Counter[str] = Counter()
        self.ops = 0  # ops that ran through the mode (each one paid a Python dispatch)
        self.entered = False

    def start(self) -> None:
        """Enter the mode: every op from now on is counted, on this thread (and autograd's, for the backward)."""
        self.__enter__()  # type: ignore[no-untyped-call]
        self.entered = True
        mode = getattr(self, "mode", None)  # the dispatch mode on the stack (FlopCounterMode's own, in torch 2.13)
        if mode is not None:  # torch.compile compiles as usual under it: else torch never compiles a function it
            mode.ignore_compile_internals = _true  # first sees under a dispatch mode (torch < 2.6?: no effect)

    def stop(self) -> bool:
        """Leave the mode if it is the innermost one (True); else leave it in place (False) and try again later.

        Popping the innermost mode when it is not ours would remove another tool's mode (one entered in the step and
        not yet left), so the counter waits until it is on top again.
        """
        if not self.entered:
            return True
        if _get_current_dispatch_mode() is not self.mode:
            return False
        self.__exit__(None, None, None)  # type: ignore[no-untyped-call]
        self.entered = False
        return True

    @property
    def total(self) -> int:
        """FLOPs counted so far."""
        return int(self.get_total_flops())

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype of the inputs that carried most of the counted FLOPs, None before any."""
        return max(self.by_dtype.items(), key=lambda kv: kv[1])[0] if self.by_dtype else None

    def _count_flops(self, func_packet: Any, out: Any, args: Any, kwargs: Any) -> Any:
        self.ops += 1
        if func_packet not in self.flop_registry:
            if _MATH_LIKE.search(str(func_packet)):
                self.uncounted[str(func_packet)] += 1
            return out
        global_counts = self.flop_counts["Global"]
        before = global_counts[func_packet]
        result = super()._count_flops(func_packet, out, args, kwargs)  # type: ignore[no-untyped-call]
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None:
            self.by_dtype[first.dtype] += global_counts[func_packet] - before
        return result


class _NoModules:
    """Stands in for ``FlopCounterMode``'s module tracker: every FLOP goes to ``Global``, no hooks are installed."""

    parents = frozenset({"Global"})

    def __enter__(self) -> _NoModules:
        return self

    def __exit__(self, *args: object) -> None:
        return None


def _raw(formula: Any) -> Any:
    """A registry formula (already taking tensors) marked so that ``FlopCounterMode`` does not wrap it again."""

    def counted(*args: Any, **kwargs: Any) -> Any:
        return formula(*args, **kwargs)

    counted._get_raw = True  # type: ignore[attr-defined]
    return counted


def _true() -> bool:
    return True

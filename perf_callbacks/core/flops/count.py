"""Counting the model FLOPs of one training step with torch's FLOP formulas, in a dispatch mode that only observes.

:class:`StepCounter` is entered in one hook and left in another (the engine's ``batch_start`` of a step's first
micro-batch and the ``batch_end`` that completes its optimizer step), so that it sees the forward and backward of
every micro-batch of that step, however the framework runs them. It counts what
``torch.utils.flop_counter.FlopCounterMode`` counts (the same formulas, ``flop_registry``), but it never changes
what runs:

- every op runs as called, ``func(*args, **kwargs)``. ``FlopCounterMode`` (torch >= 2.6) runs an op without a FLOP
  formula through its composite decomposition when it has one, and ``aten.silu_backward`` (every SwiGLU MLP: LLaMA,
  Mistral, Qwen) and ``aten.mish_backward`` decomposed round differently from their kernels: the weights of a run
  would differ from the same run without us. Such an op is counted on a shadow instead: its decomposition runs on
  meta tensors of the same shapes (no data, no kernels, no random numbers), and its FLOPs are those of the ops in
  the decomposition, as ``FlopCounterMode`` counts them;
- formulas for the CPU flash-attention ops (``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward),
  the same as torch's for the CUDA flash-attention ops, which torch's registry lacks (see :func:`extra_formulas`);
- no per-module breakdown (``FlopCounterMode`` installs global module hooks for it, which the total does not need);
- it records the dtype of each counted op's first input (the compute dtype: bf16 under autocast, for example) and
  the ops whose work the count would miss: ops that look like matrix math but have no FLOP formula (an LSTM, a
  custom attention kernel), and higher-order operators without one (``torch.cond``, a Triton kernel), which run
  as called and are not looked into.

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

import functools
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode
from torch.utils._pytree import tree_map_only
from torch.utils.flop_counter import flop_registry

_MATH_LIKE = re.compile(r"mm|matmul|conv|attention|attn|linear|einsum|rnn|lstm|gru|triton", re.IGNORECASE)
"""Op names that suggest heavy math: run without a FLOP formula, the count would miss their work."""
_CPU_TWINS = {
    "_scaled_dot_product_flash_attention_for_cpu": "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "_scaled_dot_product_flash_attention_backward",
}
_QUERIES = ("sym_is_contiguous", "is_contiguous", "is_strides_like_format", "is_non_overlapping_and_dense", "size",
            "sym_size", "stride", "sym_stride", "storage_offset", "sym_storage_offset", "numel", "sym_numel", "dim")
"""Metadata queries that tensor subclasses (nested tensors) answer themselves: left to them, as FlopCounterMode does."""
_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd


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


class StepCounter:
    """FLOPs of the ops run between :meth:`start` and :meth:`stop`, by torch's formulas; nothing runs differently.

    Args:
        shadow: a counter of decompositions on meta tensors (see :meth:`count_decomposed`), not of a real step.
        owner: the path of the module each op belongs to (``core/flops/modules.py``), for ``by_module``; None: not kept.
    """

    def __init__(self, *, shadow: bool = False, owner: Callable[[], str | None] | None = None) -> None:
        self.formulas = _formulas()
        self.flops: Counter[Any] = Counter()  # by op (OpOverloadPacket, or higher-order operator)
        self.owner = owner
        self.by_module: Counter[str | None] = Counter()  # with an owner: FLOPs by module path (None: outside all)
        self.by_dtype: Counter[torch.dtype] = Counter()
        self.uncounted: Counter[str] = Counter()
        self.ops = 0  # ops that ran through the mode (each one paid a Python dispatch)
        self.mode = _Observer(self, shadow)
        self.entered = False
        self.error: Exception | None = None  # the first failure of counting (a formula that raised): nothing counted

    def start(self) -> None:
        """Enter the mode: every op from now on is counted, on this thread (and autograd's, for the backward)."""
        self.mode.__enter__()  # type: ignore[no-untyped-call]
        self.entered = True

    def stop(self) -> bool:
        """Leave the mode if it is the innermost one (True); else leave it in place (False) and try again later.

        Popping the innermost mode when it is not ours would remove another tool's mode (one entered in the step and
        not yet left), so the counter waits until it is on top again.
        """
        if not self.entered:
            return True
        if _get_current_dispatch_mode() is not self.mode:
            return False
        self.mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]
        self.entered = False
        return True

    @property
    def total(self) -> int:
        """FLOPs counted so far."""
        return sum(self.flops.values())

    @property
    def dtype(self) -> torch.dtype | None:
        """The dtype of the inputs that carried most of the counted FLOPs, None before any."""
        return self.by_dtype.most_common(1)[0][0] if self.by_dtype else None

    def observe(self, func: Any, out: Any, args: Any, kwargs: Any) -> None:
        """Count an op that ran: by its formula, else (outside a shadow) by its decomposition if it has one."""
        if not isinstance(func, torch._ops.OpOverload):  # a higher-order operator
            self.count(func, out, args, kwargs)
        elif not self.mode.shadow and _decomposes(func):
            self.count_decomposed(func, out, args, kwargs)
        else:
            self.count(func._overloadpacket, out, args, kwargs)

    def count(self, op: Any, out: Any, args: Any, kwargs: Any) -> None:
        """Count one op that ran (``op``: its overload packet, or a higher-order operator) from its shapes."""
        self.ops += 1
        formula = self.formulas.get(op)
        if formula is None:
            if isinstance(op, torch._ops.HigherOrderOperator) or _MATH_LIKE.search(str(op)):
                self.uncounted[_name(op)] += 1
            return
        flops = int(formula(*args, **kwargs, out_val=out))
        self.flops[op] += flops
        if self.owner is not None:
            self.by_module[self.owner()] += flops
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None:
            self.by_dtype[first.dtype] += flops

    def count_decomposed(self, func: torch._ops.OpOverload, out: Any, args: Any, kwargs: Any) -> None:
        """Count an op that ran whole as ``FlopCounterMode`` counts it: by its decomposition, run on meta tensors.

        When the decomposition cannot run on meta tensors (it reads values, say), the op is counted as itself: by
        its formula if it has one, else noted as uncounted if it looks like matrix math (as any op without one).
        """
        shadow = StepCounter(shadow=True)
        try:
            meta_args, meta_kwargs = tree_map_only(torch.Tensor, _on_meta, (args, kwargs))
            with shadow.mode:
                done = func.decompose(*meta_args, **meta_kwargs) is not NotImplemented
        except Exception:  # noqa: BLE001 - no meta kernel, or the decomposition needs values
            done = False
        if not done:
            self.count(func._overloadpacket, out, args, kwargs)
            return
        self.ops += 1
        self.flops.update(shadow.flops)
        if self.owner is not None:
            self.by_module[self.owner()] += sum(shadow.flops.values())
        self.by_dtype.update(shadow.by_dtype)
        self.uncounted.update(shadow.uncounted)


class _Observer(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Runs every op as called and hands it to its counter; a shadow's decomposes ops (on meta tensors) as torch's.

    Args:
        counter: what counts each op.
        shadow: decompose ops that have a composite kernel, as ``FlopCounterMode`` does; only on meta tensors.
    """

    supports_higher_order_operators = True

    def __init__(self, counter: StepCounter, shadow: bool) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.counter, self.shadow = counter, shadow

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """torch.compile compiles as usual under it (else torch never compiles a function it first sees under it)."""
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _queries():
            return NotImplemented
        if self.shadow and isinstance(func, torch._ops.OpOverload) and _decomposes(func):  # meta tensors only
            with self:
                result = func.decompose(*args, **kwargs)
            if result is not NotImplemented:
                return result
        out = func(*args, **kwargs)  # the op as called: its errors are the user's, and propagate unchanged
        if self.shadow:  # a failure here is the decomposition's: count_decomposed catches it
            self.counter.observe(func, out, args, kwargs)
        else:
            try:
                self.counter.observe(func, out, args, kwargs)
            except Exception as err:  # noqa: BLE001 - a failing count never fails the step: the engine says why
                self.counter.error = self.counter.error or err
        return out


def op_name(op: Any) -> str:
    """The trace's name of a counted op: ``aten.mm`` (an overload packet) -> ``aten::mm``.

    Example:
        >>> op_name(torch.ops.aten.mm)
        'aten::mm'
    """
    return str(op).replace(".", "::", 1)


@functools.cache
def _formulas() -> dict[Any, Any]:
    return {**flop_registry, **extra_formulas()}


@functools.cache
def _queries() -> frozenset[Any]:
    ops = {getattr(torch.ops.aten, name).default for name in _QUERIES if hasattr(torch.ops.aten, name)}
    return frozenset(ops | {torch.ops.aten.is_contiguous.memory_format, torch.ops.prim.layout.default})


@functools.cache
def _decomposes(func: torch._ops.OpOverload) -> bool:
    """Whether ``FlopCounterMode`` (torch >= 2.6) would run ``func`` decomposed: it has a composite kernel."""
    if func is torch.ops.prim.device.default:
        return False
    name = func.name()  # type: ignore[no-untyped-call]
    return _COMPOSITE in func.py_kernels or torch._C._dispatch_has_kernel_for_dispatch_key(name, _COMPOSITE)


def _on_meta(t: torch.Tensor) -> torch.Tensor:
    """A tensor of ``t``'s shape, strides and dtype on the meta device: no data, and no kernel runs on it."""
    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")


def _name(op: Any) -> str:
    return str(getattr(op, "_name", None) or op) if isinstance(op, torch._ops.HigherOrderOperator) else str(op)


def _raw(formula: Any) -> Any:
    """A registry formula (already taking tensors) marked so that ``FlopCounterMode`` does not wrap it again."""

    def counted(*args: Any, **kwargs: Any) -> Any:
        return formula(*args, **kwargs)

    counted._get_raw = True  # type: ignore[attr-defined]
    return counted

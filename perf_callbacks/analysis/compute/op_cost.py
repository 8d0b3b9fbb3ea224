"""FLOPs and bytes moved of one operator call, from its recorded shapes and dtypes (``record_shapes=True``).

FLOPs follow ``torch.utils.flop_counter`` (FlopCounterMode): a matrix product of ``[M, K] x [K, N]`` is ``2MKN``
(bias additions are not counted), attention ``2 * batch * heads * L * S * (E + Ev)`` forward and twice that
backward, a convolution ``2 * output elements * (C_in / groups) * kernel size`` forward and twice that backward.
Element-wise ops count one FLOP per output element, reductions one per input element (a convention: their bound is
the memory bandwidth). Bytes are the least traffic the call can do: each input read once, each output written once;
the tensor that ``fill_``, ``zero_`` and ``copy_`` write over is not read, nor the ``out`` tensor of an ``out=`` call
(recorded as an argument past those of the op's functional form, ``OUT_AFTER``). An element-wise output has the dtype
torch's type promotion gives for the arithmetic ops (``PROMOTING``: bf16 x fp32 writes fp32), an ``out=`` call its
``out`` tensor's, any other call (in place ones included) its first tensor's.

Example:
    >>> op_cost("aten::mm", [[64, 32], [32, 16]], ["float", "float"], [])
    ('gemm', 65536, 14336)
    >>> op_cost("aten::add", [[8, 4], [8, 4], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"], [])
    ('elementwise', 32, 192)
    >>> op_cost("aten::mm", [[64, 32], []], ["float", ""], []) is None
    True
    >>> op_cost("aten::copy_", [[8, 4], [8, 4], []], ["float", "c10::BFloat16", "Scalar"], [])  # read 64, write 128
    ('elementwise', 32, 192)
"""

from __future__ import annotations

from math import prod
from typing import Any

from perf_callbacks.analysis.trace.op_names import (
    ATTENTION,
    ATTENTION_BACKWARD,
    CONV,
    CONV_BACKWARD,
    ELEMENTWISE,
    FLASH_LAYOUT,
    GEMMS,
    REDUCTIONS,
)
from perf_callbacks.analysis.trace.window import element_bytes

OVERWRITE = frozenset(("aten::fill_", "aten::zero_", "aten::copy_"))
"""Ops that write over their first tensor without reading it: its bytes are the output's, not an input's."""
OUT_AFTER = {
    **dict.fromkeys(("aten::add", "aten::sub", "aten::clamp", "aten::where", "aten::threshold_backward",
                     "aten::gelu_backward", "aten::_softmax", "aten::_log_softmax"), 3),
    **dict.fromkeys(("aten::mul", "aten::div", "aten::pow", "aten::gelu", "aten::clamp_min", "aten::silu_backward",
                     "aten::sigmoid_backward", "aten::tanh_backward"), 2),
    **dict.fromkeys(("aten::silu", "aten::sigmoid", "aten::tanh", "aten::exp", "aten::neg", "aten::rsqrt",
                     "aten::sqrt"), 1),
    "aten::_softmax_backward_data": 4,
}
"""Arguments of an element-wise op's functional form: a call that has more, the last a tensor, is its ``out=`` form."""
PROMOTING = frozenset(f"aten::{n}" for n in ("add", "sub", "mul", "div", "pow", "clamp", "clamp_min", "where"))
"""Element-wise ops whose output dtype is the promotion of their tensors' (the others: their first tensor's, as
``native_layer_norm`` of bf16 input with fp32 weights writes bf16)."""
_FLOATS = frozenset(("float", "double", "half", "bfloat16", "float32", "float64", "float16", "c10::half",
                     "c10::bfloat16"))
_HALVES = {"half": "fp16", "float16": "fp16", "c10::half": "fp16", "bfloat16": "bf16", "c10::bfloat16": "bf16"}
Cost = tuple[str, int, int]
"""``(kind, FLOPs, bytes)``: kind is ``gemm``, ``attention``, ``conv``, ``elementwise`` or ``reduction``."""


def op_cost(name: str, dims: Any, types: Any, concrete: Any) -> Cost | None:
    """``(kind, FLOPs, bytes)`` of one call of ``name``, None when its shapes do not say.

    From its ``Input Dims``, ``Input type`` and ``Concrete Inputs``; None when they are missing or malformed, for an
    unknown dtype, and for a transposed convolution.
    """
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    tensors = [
        (d, t)
        for d, t in zip(dims, types, strict=False)
        if isinstance(d, list) and d and _ints(d) and element_bytes(t) is not None
    ]
    if not tensors:
        return None
    try:
        if name in GEMMS:
            return _gemm(name, tensors)
        if name in ATTENTION or name in ATTENTION_BACKWARD or name in FLASH_LAYOUT:
            return _attention(name, tensors)
        if name in CONV or name in CONV_BACKWARD:
            return _conv(name, dims, tensors, concrete if isinstance(concrete, list) else [])
        if name in ELEMENTWISE:
            return _elementwise(name, tensors, _has_out(name, dims, types))
        if name in REDUCTIONS:
            return "reduction", _numel(tensors[0][0]), _bytes(*tensors[0])
    except (IndexError, ValueError, TypeError):
        return None
    return None


def dtype_of(types: Any) -> str:
    """The short name of the first tensor input's type (``fp32``, ``bf16``, ``fp16``, ``fp64``), else its own name."""
    first = (
        next((t for t in types if isinstance(t, str) and element_bytes(t) is not None), "")
        if isinstance(types, list)
        else ""
    )
    low = first.lower()
    return {
        "float": "fp32",
        "c10::bfloat16": "bf16",
        "bfloat16": "bf16",
        "c10::half": "fp16",
        "half": "fp16",
        "double": "fp64",
    }.get(low, low)


def _gemm(name: str, tensors: list[tuple[list[int], str]]) -> Cost | None:
    if name in ("aten::addmm", "aten::baddbmm"):
        (c, tc), (a, ta), (b, tb) = tensors[0], tensors[1], tensors[2]
        extra = _bytes(c, tc)
    else:
        (a, ta), (b, tb) = tensors[0], tensors[1]
        extra = 0
    if name == "aten::linear":  # weight [N, K]
        m, k, n = _numel(a[:-1]), a[-1], b[0]
        out = [*a[:-1], n]
        flops = 2 * m * k * n
    else:
        if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
            return None
        batch = prod(_broadcast(a[:-2], b[:-2]))
        m, k, n = a[-2], a[-1], b[-1]
        out = [batch, m, n]
        flops = 2 * batch * m * k * n
    return "gemm", flops, _bytes(a, ta) + _bytes(b, tb) + extra + _numel(out) * (element_bytes(ta) or 0)


def _attention(name: str, tensors: list[tuple[list[int], str]]) -> Cost | None:
    backward = name in ATTENTION_BACKWARD or name.endswith("_backward")
    q, k, v = (t[0] for t in tensors[1:4]) if backward else (t[0] for t in tensors[0:3])
    size = element_bytes(tensors[0][1]) or 0
    if name in FLASH_LAYOUT:  # [batch, seq, heads, dim] -> [batch, heads, seq, dim]
        q, k, v = ([x[0], x[2], x[1], x[3]] for x in (q, k, v))
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    batch, length, width, s, wv = q[0] * q[1], q[2], q[3], k[2], v[3]
    flops = 2 * batch * length * s * (width + wv)
    out = batch * length * wv
    qkv = (_numel(q) + _numel(k) + _numel(v)) * size
    if backward:  # reads grad_out, q, k, v, out; writes grad q, k, v
        return "attention", 2 * flops, qkv * 2 + 2 * out * size
    return "attention", flops, qkv + out * size


def _conv(name: str, dims: list[Any], tensors: list[tuple[list[int], str]], concrete: list[Any]) -> Cost | None:
    size = element_bytes(tensors[0][1]) or 0
    if name in CONV_BACKWARD:  # grad_out, input, weight: the output's shape is grad_out's
        out, x, w = (t[0] for t in tensors[:3])
        flops = 2 * _numel(out) * _numel(w[1:])
        return "conv", 2 * flops, (2 * _numel(out) + 2 * _numel(x) + 2 * _numel(w)) * size
    stride_at, pad_at, dil_at, groups_at, transposed_at = CONV[name]
    if transposed_at is not None and _value(concrete, transposed_at) == "True":
        return None
    x, w = dims[0], dims[1]
    spatial = len(x) - 2
    stride = _list(concrete, stride_at, spatial, 1)
    pad = _list(concrete, pad_at, spatial, 0)
    dil = _list(concrete, dil_at, spatial, 1)
    out_sp = [(x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(spatial)]
    out = [x[0], w[0], *out_sp]
    flops = 2 * _numel(out) * _numel(w[1:])
    bias = (
        _numel(dims[2])
        if name in ("aten::convolution", "aten::_convolution", "aten::mkldnn_convolution")
        and isinstance(dims[2], list)
        and dims[2]
        else 0
    )
    return "conv", flops, (_numel(x) + _numel(w) + bias + _numel(out)) * size


def _elementwise(name: str, tensors: list[tuple[list[int], str]], out: bool) -> Cost:
    """One FLOP per output element; each input read once (not the tensor written over, nor ``out``), the output once."""
    read = tensors[:-1] if out else tensors[1:] if name in OVERWRITE else tensors
    shape: list[int] = []
    for d, _ in read if out else tensors:
        shape = _broadcast(shape, d)
    numel = _numel(shape)
    if out:
        size = element_bytes(tensors[-1][1]) or 0
    elif name in PROMOTING:
        size = _promoted([t for _, t in tensors])
    else:  # in place (written in its first tensor's dtype), or an op that keeps its input's dtype
        size = element_bytes(tensors[0][1]) or 0
    return "elementwise", numel, sum(_bytes(d, t) for d, t in read) + numel * size


def _has_out(name: str, dims: list[Any], types: list[Any]) -> bool:
    """Whether the call is the ``out=`` form of ``name``: an argument past ``OUT_AFTER``'s count, and a tensor."""
    count = OUT_AFTER.get(name)
    return (count is not None and len(dims) > count and isinstance(dims[-1], list) and bool(dims[-1])
            and element_bytes(types[-1] if len(types) == len(dims) else None) is not None)


def _promoted(types: list[str]) -> int:
    """Bytes per element of torch's promoted dtype over tensors with dimensions.

    Floating over integral, the wider of two, bf16 with fp16 fp32.

    Example:
        >>> _promoted(["c10::BFloat16", "float"]), _promoted(["c10::Half", "c10::BFloat16"]), _promoted(["bool", "int"])
        (4, 4, 4)
    """
    low = [t.lower() for t in types]
    pool = [t for t in low if t in _FLOATS] or low
    size = max(element_bytes(t) or 0 for t in pool)
    halves = {_HALVES[t] for t in pool if t in _HALVES}
    return 4 if size == 2 and len(halves) > 1 else size


def _broadcast(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + list(a), [1] * (n - len(b)) + list(b)
    return [max(x, y) for x, y in zip(a, b, strict=True)]


def _value(concrete: list[Any], i: int | None) -> str:
    return str(concrete[i]) if i is not None and i < len(concrete) else ""


def _list(concrete: list[Any], i: int, n: int, default: int) -> list[int]:
    text = _value(concrete, i).strip("[] ")
    values = [int(v) for v in text.split(",") if v.strip()] if text else []
    if len(values) == 1:
        values *= n
    return values if len(values) == n else [default] * n


def _ints(d: list[Any]) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in d)


def _numel(d: list[int]) -> int:
    return prod(d)


def _bytes(d: list[int], t: str) -> int:
    return prod(d) * (element_bytes(t) or 0)

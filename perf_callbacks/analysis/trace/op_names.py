"""The operators the roofline knows, by family: the trace reader keeps the recorded shapes of these (``KNOWN``)."""

from __future__ import annotations

GEMMS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"})
ATTENTION = frozenset(
    {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_cudnn_attention_forward",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    }
)
ATTENTION_BACKWARD = frozenset(
    {
        "aten::_scaled_dot_product_flash_attention_backward",
        "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_cudnn_attention_backward",
        "aten::_cudnn_attention_backward",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    }
)
FLASH_LAYOUT = frozenset(
    {
        "aten::_flash_attention_forward",
        "aten::_efficient_attention_forward",
        "aten::_flash_attention_backward",
        "aten::_efficient_attention_backward",
    }
)
"""Attention ops whose tensors are ``[batch, seq, heads, dim]`` (the others: ``[batch, heads, seq, dim]``)."""
CONV = {
    "aten::convolution": (3, 4, 5, 8, 6),
    "aten::_convolution": (3, 4, 5, 8, 6),
    "aten::cudnn_convolution": (3, 2, 4, 5, None),
    "aten::mkldnn_convolution": (4, 3, 5, 6, None),
}
"""Argument positions of stride, padding, dilation, groups and ``transposed`` (None: never transposed)."""
CONV_BACKWARD = frozenset({"aten::convolution_backward"})
ELEMENTWISE = frozenset(
    f"aten::{n}"
    for n in (
        "add",
        "add_",
        "sub",
        "sub_",
        "mul",
        "mul_",
        "div",
        "div_",
        "relu",
        "relu_",
        "gelu",
        "silu",
        "silu_",
        "sigmoid",
        "tanh",
        "exp",
        "neg",
        "rsqrt",
        "sqrt",
        "pow",
        "clamp",
        "clamp_min",
        "where",
        "copy_",
        "fill_",
        "zero_",
        "threshold_backward",
        "gelu_backward",
        "silu_backward",
        "sigmoid_backward",
        "tanh_backward",
        "native_dropout",
        "native_dropout_backward",
        "_softmax",
        "_softmax_backward_data",
        "_log_softmax",
        "native_layer_norm",
        "addcmul_",
        "addcdiv_",
        "lerp_",
        "masked_fill_",
    )
)
REDUCTIONS = frozenset(f"aten::{n}" for n in ("sum", "mean", "amax", "max", "min", "norm", "linalg_vector_norm"))
KNOWN = GEMMS | ATTENTION | ATTENTION_BACKWARD | FLASH_LAYOUT | CONV.keys() | CONV_BACKWARD | ELEMENTWISE | REDUCTIONS
"""Every op whose shapes the trace reader keeps."""


def family(name: str) -> str:
    """``gemm``, ``attention``, ``conv``, ``elementwise``, ``reduction``, or "" for an op the roofline does not know.

    Example:
        >>> family("aten::linear"), family("aten::_cudnn_attention_backward"), family("aten::nonzero")
        ('gemm', 'attention', '')
    """
    if name in GEMMS:
        return "gemm"
    if name in ATTENTION or name in ATTENTION_BACKWARD or name in FLASH_LAYOUT:
        return "attention"
    if name in CONV or name in CONV_BACKWARD:
        return "conv"
    if name in ELEMENTWISE:
        return "elementwise"
    return "reduction" if name in REDUCTIONS else ""

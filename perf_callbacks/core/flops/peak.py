"""The device's peak FLOP/s for the run's compute dtype, from a maintained table rather than one written here.

The table is Lightning's (``lightning.fabric.utilities.throughput.get_available_flops``, the one its
``ThroughputMonitor`` uses): dense figures for the CUDA devices it knows, per dtype, with TF32 for float32 matmuls
when ``torch.get_float32_matmul_precision()`` allows it on Ampere or later. It is imported only when a CUDA device
needs a peak and ``peak_tflops`` is not set. CPUs, devices missing from the table and runs without Lightning get no
peak; the reason says how to give one (``peak_tflops``).

Example:
    >>> import torch
    >>> peak_flops(torch.device("cpu"), torch.float32)
    (None, 'no peak FLOP/s is known for CPUs: set peak_tflops')
    >>> peak_flops(torch.device("cpu"), torch.float32, override_tflops=1.0)
    (1000000000000.0, 'peak_tflops: 1')
"""

from __future__ import annotations

import warnings

import torch

_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}


def mixed_precision_dtype(precision: object) -> torch.dtype | None:
    """The autocast dtype a framework's precision setting names, None for full precision or one not known here.

    Lightning's ``trainer.precision`` (``bf16-mixed``, ``16-mixed``, ``bf16-true``...), Accelerate's
    ``mixed_precision`` (``bf16``, ``fp16``; ``fp8`` has no peak in the table) and ``bf16``/``fp16`` for transformers.

    Example:
        >>> mixed_precision_dtype("bf16-mixed"), mixed_precision_dtype("fp16"), mixed_precision_dtype("32-true")
        (torch.bfloat16, torch.float16, None)
    """
    return _MIXED.get(str(precision).lower()) if precision is not None else None


_MIXED = dict.fromkeys(("bf16", "bf16-mixed", "bf16-true"), torch.bfloat16)
_MIXED.update(dict.fromkeys(("fp16", "16", "16-mixed", "16-true", "half"), torch.float16))


def dtype_name(dtype: torch.dtype | None) -> str:
    """``bf16``, ``fp16``, ``fp32`` (``tf32`` when float32 matmuls may use TF32 on CUDA), else torch's name."""
    if dtype is None:
        return "unknown"
    if dtype is torch.float32 and torch.get_float32_matmul_precision() != "highest":
        return "fp32 (tf32 matmuls allowed)"
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def peak_flops(device: torch.device | None, dtype: torch.dtype | None,
               override_tflops: float | None = None) -> tuple[float | None, str]:
    """The peak FLOP/s of ``device`` for ``dtype`` and where it comes from; (None, why) when unknown.

    Args:
        device: the rank's device (None: CPU).
        dtype: the compute dtype of the run's matmuls.
        override_tflops: the ``peak_tflops`` config key, which wins.
    """
    if override_tflops is not None:
        return override_tflops * 1e12, f"peak_tflops: {override_tflops:g}"
    if device is None or device.type == "cpu":
        return None, "no peak FLOP/s is known for CPUs: set peak_tflops"
    if device.type != "cuda":
        return None, f"no peak FLOP/s is known for {device.type} devices here: set peak_tflops"
    name = _device_name(device)
    try:
        from lightning.fabric.utilities.throughput import get_available_flops
    except ImportError:
        return None, f"the peak FLOP/s of {name} comes from Lightning's table: install lightning, or set peak_tflops"
    try:
        with warnings.catch_warnings():  # its "FLOPs not found for ..." warning: our reason below says it once
            warnings.simplefilter("ignore")
            value = get_available_flops(device, dtype or torch.float32)
    except Exception as err:  # noqa: BLE001 - an unknown device must not stop the run
        return None, f"Lightning's table failed for {name} ({type(err).__name__}: {err}): set peak_tflops"
    if not value:
        return None, f"{name} with {dtype_name(dtype)} is not in Lightning's table of peak FLOP/s: set peak_tflops"
    return float(value), f"Lightning's get_available_flops for {name}, {dtype_name(dtype)}"


def _device_name(device: torch.device) -> str:
    try:
        return str(torch.cuda.get_device_name(device))
    except Exception:  # noqa: BLE001
        return str(device)

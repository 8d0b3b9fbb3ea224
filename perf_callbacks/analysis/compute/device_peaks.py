"""The device's peaks for the roofline: FLOP/s per compute dtype and memory bandwidth, with where each comes from.

The first that applies, for each figure:

- peak memory bandwidth: ``--peak-tbps`` (report) or ``peak_tbps`` (config, written into the trace), else what the
  training process read from the device itself (NVML: memory clock x bus width, written into the trace by
  ``core/windows/device_meta.py``), else the table below, else none (the report says so);
- peak FLOP/s: the run's own peak for its compute dtype (``perf_callbacks_flops``, the MFU figure: ``peak_tflops`` or
  Lightning's table), else the table below for the dtype.

The table holds dense figures (no sparsity) of a few data-centre GPUs, found by the name in the trace's
``deviceProperties``. Each number's source is in the comment above it.

Example:
    >>> p = device_peaks({"deviceProperties": [{"name": "NVIDIA H200"}]}, {})
    >>> p.tflops["bf16"], p.tbps, p.tbps_source
    (989.4, 4.8, 'table: NVIDIA H200 (NVIDIA H200 datasheet)')
    >>> device_peaks({}, {}).tbps is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import isfinite
from typing import Any

DEVICE_KEY = "perf_callbacks_device"
"""The trace metadata key written by the training process (``perf_callbacks.core.windows.device_meta.META_KEY``)."""

_TABLE: dict[str, tuple[dict[str, float], float, str]] = {
    # NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): FP32 67 TF, TF32 989 TF, BF16/FP16 1979 TF with
    # sparsity (dense: half), HBM3e 4.8 TB/s. The same SMs as the H100 SXM.
    "h200": ({"fp64": 33.5, "fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}, 4.8, "NVIDIA H200 datasheet"),
    # NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100), SXM: TF32 989 / BF16 1979 TF with sparsity, 3.35 TB/s.
    "h100 sxm": (
        {"fp64": 33.5, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
        3.35,
        "NVIDIA H100 datasheet (SXM)",
    ),
    # the same datasheet, PCIe: TF32 756 / BF16 1513 TF with sparsity, 2.0 TB/s.
    "h100 pcie": (
        {"fp64": 25.6, "fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0},
        2.0,
        "NVIDIA H100 datasheet (PCIe)",
    ),
    # NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100): TF32 156, BF16 312 TF dense; 80GB SXM 2.039 TB/s.
    "a100 80gb": (
        {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        2.039,
        "NVIDIA A100 datasheet (80GB SXM)",
    ),
    # the same datasheet, 40GB: 1.555 TB/s.
    "a100": (
        {"fp64": 9.7, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        1.555,
        "NVIDIA A100 datasheet (40GB)",
    ),
}
_DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp64": "fp64", "fp32 (tf32 matmuls allowed)": "tf32"}


@dataclass
class Peaks:
    """Peak TFLOP/s by compute dtype (``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp64``) and peak TB/s.

    Args:
        tflops: what is known, by dtype.
        tbps: peak memory bandwidth in TB/s (1e12 bytes/s), None when not known.
        tflops_source: where the FLOP/s figures come from.
        tbps_source: where the bandwidth comes from (or why there is none).
        device: the device's name, "" when the trace does not say.
    """

    tflops: dict[str, float] = field(default_factory=dict)
    tbps: float | None = None
    tflops_source: str = ""
    tbps_source: str = ""
    device: str = ""


def device_peaks(meta: dict[str, Any], flops: dict[str, Any]) -> Peaks:
    """The peaks of the device that recorded a trace, from its metadata and the MFU figures (``mfu.flops_meta``)."""
    name = _device_name(meta)
    key = _table_key(name, meta)
    table, tbps, source = _TABLE.get(key, ({}, None, "")) if key else ({}, None, "")
    peaks = Peaks(dict(table), tbps, f"table: {name} ({source})" if table else "", "", name)
    if tbps is not None:
        peaks.tbps_source = f"table: {name} ({source})"
    own = meta.get(DEVICE_KEY)
    if isinstance(own, dict) and _positive(own.get("peak_tbps")):
        peaks.tbps, peaks.tbps_source = float(own["peak_tbps"]), str(own.get("peak_tbps_source") or "the run")
    dtype = _DTYPES.get(str(flops.get("dtype") or ""))
    if dtype and flops.get("peak_tflops"):
        peaks.tflops[dtype] = float(flops["peak_tflops"])
        peaks.tflops_source = f"{dtype}: {flops.get('peak_source') or 'the run'}" + (
            f"; others {peaks.tflops_source}" if peaks.tflops_source else ""
        )
    if peaks.tbps is None:
        peaks.tbps_source = (
            f"no peak memory bandwidth known for {name or 'this device'}: set peak_tbps (or --peak-tbps)"
        )
    return peaks


def _device_name(meta: dict[str, Any]) -> str:
    props = meta.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        return str(props[0].get("name") or "")
    return ""


def _table_key(name: str, meta: dict[str, Any]) -> str | None:
    low = name.lower()
    if "h200" in low:
        return "h200"
    if "h100" in low:
        return "h100 pcie" if "pcie" in low else "h100 sxm"
    if "a100" in low:
        props = meta.get("deviceProperties") or [{}]
        memory = props[0].get("totalGlobalMem", 0) if isinstance(props[0], dict) else 0
        return "a100 80gb" if "80gb" in low or (isinstance(memory, int) and memory > 60e9) else "a100"
    return None


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and isfinite(value) and value > 0

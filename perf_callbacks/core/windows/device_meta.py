"""What the roofline and the precision hint need of the live run, written into each window's trace.

``perf_callbacks_device`` (read back by :mod:`perf_callbacks.analysis.compute.device_peaks` and
:mod:`perf_callbacks.analysis.compute.precision`): the device's peak memory bandwidth (the ``peak_tbps`` config key,
else NVML's maximum memory clock x memory bus width on CUDA, when ``pynvml`` is installed: the ``[nvml]`` extra), and
the settings that decide whether fp32 matrix products may use tensor cores: ``torch.get_float32_matmul_precision()``,
``torch.backends.cuda.matmul.allow_tf32``, ``torch.backends.cudnn.allow_tf32``, and the framework's mixed-precision
dtype. Read at the start of each window (attribute reads; NVML once per process), never in a step outside one.

Example:
    >>> from pathlib import Path
    >>> from perf_callbacks.core.context import RunContext
    >>> meta = device_meta(RunContext(Path("out"), "run"), cuda=False, peak_tbps=None)
    >>> meta["peak_tbps"], meta["float32_matmul_precision"] in ("highest", "high", "medium")
    (None, True)
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch

from perf_callbacks.core.context import RunContext
from perf_callbacks.core.flops.peak import dtype_name

log = logging.getLogger(__name__)
META_KEY = "perf_callbacks_device"
"""The trace's top-level metadata key (``perf_callbacks.analysis.compute.device_peaks.DEVICE_KEY``)."""


def device_meta(ctx: RunContext, cuda: bool, peak_tbps: float | None) -> dict[str, Any]:
    """The ``perf_callbacks_device`` entry for a window of this run: plain JSON values; never raises."""
    out: dict[str, Any] = {"peak_tbps": None, "peak_tbps_source": ""}
    try:
        out.update(_settings(ctx))
        if peak_tbps is not None:
            out["peak_tbps"], out["peak_tbps_source"] = float(peak_tbps), f"peak_tbps: {peak_tbps:g}"
        elif cuda and ctx.device is not None and ctx.device.type == "cuda":
            index = ctx.device.index if ctx.device.index is not None else torch.cuda.current_device()
            out["peak_tbps"], out["peak_tbps_source"] = nvml_bandwidth(index)
    except Exception:  # noqa: BLE001 - the window's trace goes on without these figures
        log.debug("perf-callbacks: could not read the device's settings", exc_info=True)
    return out


@functools.cache
def nvml_bandwidth(index: int) -> tuple[float | None, str]:
    """Peak memory bandwidth (TB/s) of CUDA device ``index`` from NVML, and its source (or why there is none).

    Double data rate: bytes/s = maximum memory clock (Hz) x 2 x bus width (bits) / 8.
    """
    try:
        import pynvml
    except ImportError:
        return None, "pynvml is not installed (pip install 'perf-callbacks[nvml]')"
    try:
        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except pynvml.NVMLError:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        clock_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
        bus_bits = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
    except Exception as err:  # noqa: BLE001 - no driver, no permission, an old NVML
        return None, f"NVML could not say ({type(err).__name__}: {err})"
    tbps = clock_mhz * 1e6 * 2 * bus_bits / 8 / 1e12
    return tbps, f"NVML: memory clock {clock_mhz} MHz x {bus_bits}-bit bus"


def _settings(ctx: RunContext) -> dict[str, Any]:
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "mixed_precision": dtype_name(ctx.compute_dtype) if ctx.compute_dtype is not None else "",
    }

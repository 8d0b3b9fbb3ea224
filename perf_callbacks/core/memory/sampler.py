"""Memory and device counters sampled once per logging interval, never per step.

On CUDA one ``torch.cuda.memory_stats_as_nested_dict`` call gives allocated, reserved and peak at once (the flat
``memory_allocated()`` builds the whole flattened dict: 127 us on an H200), then the peak is reset so each interval
reports its own peak. None of these calls synchronises with the device. CPU-only runs log the process RSS instead.
With ``nvidia-ml-py`` installed, NVML adds GPU utilization and power (about 1.4 us a read).

Example:
    >>> sampler = MemorySampler(device=None, nvml=False)
    >>> sorted(sampler.sample())
    ['memory/host_rss_mb']
"""

from __future__ import annotations

import contextlib
import os
import resource
from typing import Any

import torch

_MB = 1024.0 * 1024.0

#: The device's out-of-memory error: ``torch.OutOfMemoryError`` from torch 2.5, ``torch.cuda.OutOfMemoryError`` (the
#: same class under its older name) before. Catching ``torch.OutOfMemoryError`` on torch 2.3-2.4 raises
#: AttributeError in place of the user's exception.
OutOfMemoryError: type[RuntimeError] = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


class MemorySampler:
    """Reads memory (and optionally NVML) counters of one device.

    Args:
        device: the CUDA device of this rank, or None for a CPU-only run.
        nvml: also read GPU utilization and power through NVML when available.
    """

    def __init__(self, device: torch.device | None, nvml: bool = True) -> None:
        self.device = device if device is not None and device.type == "cuda" else None
        self._nvml: Any = None
        self._handle: Any = None
        if self.device is not None and nvml:
            self._setup_nvml()

    def sample(self) -> dict[str, float]:
        """Current values, named ``memory/...`` and ``gpu/...``; resets the CUDA peak for the next interval."""
        out = self._cuda() if self.device is not None else {"memory/host_rss_mb": host_rss_bytes() / _MB}
        if self._handle is not None:
            out.update(self._nvml_read())
        return out

    def peak_allocated_mb(self) -> float | None:
        """Peak allocated memory since the last reset (CUDA only)."""
        if self.device is None:
            return None
        return float(torch.cuda.max_memory_allocated(self.device)) / _MB

    def _cuda(self) -> dict[str, float]:
        stats = torch.cuda.memory_stats_as_nested_dict(self.device)
        allocated = stats.get("allocated_bytes", {}).get("all", {})
        reserved = stats.get("reserved_bytes", {}).get("all", {})
        torch.cuda.reset_peak_memory_stats(self.device)
        return {
            "memory/allocated_mb": allocated.get("current", 0) / _MB,
            "memory/reserved_mb": reserved.get("current", 0) / _MB,
            "memory/peak_allocated_mb": allocated.get("peak", 0) / _MB,
        }

    def _setup_nvml(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            assert self.device is not None
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            try:
                self._handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            except pynvml.NVMLError:
                self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
        except Exception:  # noqa: BLE001 - NVML is optional: no package, no driver, no permission
            self._handle = None

    def _nvml_read(self) -> dict[str, float]:
        try:
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            power = self._nvml.nvmlDeviceGetPowerUsage(self._handle)
        except Exception:  # noqa: BLE001
            self._handle = None
            return {}
        return {"gpu/utilization_pct": float(util.gpu), "gpu/power_w": power / 1000.0}


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_statm: list[int] = []  # the open fd of this process's /proc/self/statm (a forked child opens its own)


def _forked() -> None:
    """In a forked child: the inherited fd reads the parent's statm."""
    while _statm:
        with contextlib.suppress(OSError):
            os.close(_statm.pop())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def host_rss_bytes() -> int:
    """Resident set size of this process (``/proc/self/statm``, kept open; peak RSS where /proc is missing).

    One ``pread`` a call: no ``getpid`` (a system call too) to tell a forked child, which opens its own at fork.
    """
    try:
        if not _statm:
            _statm.append(os.open("/proc/self/statm", os.O_RDONLY))
        return int(os.pread(_statm[0], 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError, AttributeError):
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

"""perf-callbacks: why is my GPU training slow, and what should I change.

Importing this package never imports Lightning or Accelerate; the adapters load on first use.

Example:
    >>> import perf_callbacks
    >>> perf_callbacks.PerfConfig().schedule.active
    3
"""

from __future__ import annotations

import typing as _typing

from perf_callbacks.config import PerfConfig, ScheduleConfig
from perf_callbacks.exceptions import (
    DataLoaderWarning,
    InstrumentUnavailableWarning,
    PerfConfigError,
    PerformanceDegradationWarning,
    PerfWarning,
    ShardingWarning,
    TraceSizeWarning,
)

if _typing.TYPE_CHECKING:
    from perf_callbacks.integrations.accelerate import AcceleratePerfHook
    from perf_callbacks.integrations.lightning import GPUPerfCallback

__version__ = "0.1.0"

__all__ = [
    "AcceleratePerfHook",
    "DataLoaderWarning",
    "GPUPerfCallback",
    "InstrumentUnavailableWarning",
    "PerfConfig",
    "PerfConfigError",
    "PerfWarning",
    "PerformanceDegradationWarning",
    "ScheduleConfig",
    "ShardingWarning",
    "TraceSizeWarning",
]

_LAZY = {
    "GPUPerfCallback": "perf_callbacks.integrations.lightning",
    "AcceleratePerfHook": "perf_callbacks.integrations.accelerate",
}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'perf_callbacks' has no attribute {name!r}")

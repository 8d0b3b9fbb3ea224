"""perf-callbacks: why is my GPU training slow, and what should I change.

Importing this package never imports Lightning, Accelerate or transformers; the adapters load on first use.

Example:
    >>> import perf_callbacks
    >>> perf_callbacks.PerfConfig().schedule.active
    3
"""

from __future__ import annotations

import typing as _typing

from perf_callbacks.config import PerfConfig, ScheduleConfig
from perf_callbacks.exceptions import (
    CompileWarning,
    DataLoaderWarning,
    InstrumentUnavailableWarning,
    MemoryGrowthWarning,
    PerfConfigError,
    PerformanceDegradationWarning,
    PerfWarning,
    ShardingWarning,
    SlowRankWarning,
    TraceSizeWarning,
)

if _typing.TYPE_CHECKING:
    from perf_callbacks.integrations.accelerate import AcceleratePerfHook
    from perf_callbacks.integrations.lightning import GPUPerfCallback
    from perf_callbacks.integrations.transformers import TransformersPerfCallback

__version__ = "0.1.0"

__all__ = [
    "AcceleratePerfHook",
    "CompileWarning",
    "DataLoaderWarning",
    "GPUPerfCallback",
    "InstrumentUnavailableWarning",
    "MemoryGrowthWarning",
    "PerfConfig",
    "PerfConfigError",
    "PerfWarning",
    "PerformanceDegradationWarning",
    "ScheduleConfig",
    "ShardingWarning",
    "SlowRankWarning",
    "TraceSizeWarning",
    "TransformersPerfCallback",
]

_LAZY = {
    "GPUPerfCallback": "perf_callbacks.integrations.lightning",
    "AcceleratePerfHook": "perf_callbacks.integrations.accelerate",
    "TransformersPerfCallback": "perf_callbacks.integrations.transformers",
}
#: the optional extra that provides each lazily imported framework
_EXTRAS = {"accelerate": "accelerate", "transformers": "transformers"}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        import importlib

        try:
            module = importlib.import_module(_LAZY[name])
        except ModuleNotFoundError as err:
            extra = _EXTRAS.get((err.name or "").partition(".")[0])
            if extra is None:
                raise
            raise ImportError(
                f"{name} needs {extra}, which is not installed: pip install \"perf-callbacks[{extra}]\""
            ) from err
        return getattr(module, name)
    raise AttributeError(f"module 'perf_callbacks' has no attribute {name!r}")

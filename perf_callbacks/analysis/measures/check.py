"""Whether a sidecar's communication, transfer, launch, memory and op-table entries have the shape the report reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Fits = Callable[[Any, Any], bool]

_COMM = {"name": str, "group": str | None, "count": int, "bytes": int | None, "total_ms": float, "exposed_ms": float,
         "algbw_gbps": float | None, "busbw_gbps": float | None, "group_size": int | None,
         "busbw_p50_gbps": float | None}
_COPY = {"kind": str, "memory": str, "count": int, "bytes": int | None, "total_ms": float, "gbps": float | None}
_LAUNCH = {"p50_us": float | None, "p95_us": float | None, "launch_call_p50_us": float | None, "small_kernels": int,
           "small_kernel_fraction": float}
_MEMORY_OP = {"name": str, "self_bytes": int, "calls": int}
_PEAK = {"bytes": int, "op": str, "ts_ms": float}
_GROWTH = {"bytes_per_step": float, "since_step": int, "until_step": int, "memory": str | None, "steps": list[int],
           "kept_per_step": float | None, "by_op": list[dict[str, Any]], "graph_kept": bool}
_GROWTH_OP = {"name": str, "bytes_per_step": float}
_OP = {"name": str, "device_time_us": float | None, "self_cpu_us": float, "calls": int, "self_memory_bytes": int}


def measures_valid(data: dict[str, Any], fits: Fits) -> bool:
    """Whether every entry of the measure fields in a rank result dict has its keys and types (``fits`` checks one).

    Example:
        >>> measures_valid({"copies": [{"kind": "HtoD"}]}, lambda v, h: True)
        False
    """
    def rows(key: str, schema: dict[str, Any]) -> bool:
        return all(_entry(r, schema, fits) for r in data.get(key) or [])

    def single(key: str, schema: dict[str, Any]) -> bool:
        return data.get(key) is None or _entry(data[key], schema, fits)

    return (rows("communication", _COMM) and rows("copies", _COPY) and rows("memory_by_op", _MEMORY_OP)
            and rows("op_table", _OP) and single("launch", _LAUNCH) and single("memory_peak", _PEAK)
            and all(len(p) == 2 for p in data.get("memory_curve") or [])
            and single("memory_growth", _GROWTH)
            and all(_entry(r, _GROWTH_OP, fits) for r in (data.get("memory_growth") or {}).get("by_op") or []))


def _entry(value: Any, schema: dict[str, Any], fits: Fits) -> bool:
    return isinstance(value, dict) and all(key in value and fits(value[key], hint) for key, hint in schema.items())

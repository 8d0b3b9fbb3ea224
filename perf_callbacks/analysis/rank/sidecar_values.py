"""Whether a sidecar's numbers can be what its trace measures: finite, shares in [0, 1], times, bytes and counts >= 0.

Every number is also bounded: none beyond :data:`MAX_ABS` in size, and times, bytes and counts at most
:data:`MAX_AMOUNT` (a ``time_ms`` of ``1e300`` would print as a 300-digit number).

``sidecar_check`` makes sure each field has its type; this module makes sure of its value, so that an edited or
damaged sidecar never reaches the report as ``nan%``, ``data wait -50.0%`` or a negative MFU. A sidecar that fails
is ignored and its trace parsed, as for a stale one. Memory by operator may be negative (an op that frees more than it
allocates), and wall-clock bounds (``start_us``, ``end_us``) may be anything finite: only finiteness is asked of them.

Example:
    >>> values_sound({"gpu_utilization": 0.7, "data_wait_fraction": -0.5})
    False
    >>> values_sound({"gpu_utilization": 0.7, "data_wait_fraction": 0.1, "span_ms": 12.0})
    True
"""

from __future__ import annotations

from collections.abc import Iterable
from math import isfinite
from typing import Any

from perf_callbacks.analysis.compute.mfu import META_KEY, flops_meta

SLACK = 1e-6
"""Rounding allowed above 1 in a share (a sum of floating-point parts)."""
MAX_AMOUNT = 1e15
"""The largest time (ms or us: 31 years in ms), byte count (a petabyte) or count a sidecar may hold."""
MAX_ABS = 1e27
"""The largest number of any kind in a sidecar (FLOPs per step included)."""
_SHARES = ("gpu_utilization", "kernel_busy_fraction", "data_wait_fraction", "backlog_fraction",
           "graph_idle_fraction", "overlap_fraction")
_AMOUNTS = ("span_ms", "step_time_ms", "peak_memory_bytes", "device_memory_bytes", "launches_per_step", "prologue_ms",
            "epilogue_ms", "bad_events", "runtime_calls")
_AMOUNT_MAPS = ("copies_ms", "comm_ms", "sync_calls_ms", "copy_exposed_ms", "collectives_by_op_ms", "set_aside_ms")
_ROW_AMOUNTS = {
    "steps": ("time_ms",),
    "top_ops": ("self_time_us", "count"),
    "communication": ("count", "bytes", "total_ms", "exposed_ms", "algbw_gbps", "busbw_gbps", "group_size",
                      "busbw_p50_gbps"),
    "copies": ("count", "bytes", "total_ms", "gbps"),
    "op_table": ("device_time_us", "self_cpu_us", "calls"),
    "memory_by_op": ("calls",),
    "devices": ("kernels_per_step",),
}


def values_sound(data: dict[str, Any]) -> bool:
    """Whether the numbers of a rank result dict (already of the right types) are ones a trace can give."""
    return (_finite(data)
            and all(_share(data.get(k)) for k in _SHARES)
            and all(_amount(data.get(k)) for k in _AMOUNTS)
            and all(_amount(v) for k in _AMOUNT_MAPS for v in (data.get(k) or {}).values())
            and all(_amount(v) for v in data.get("collectives_ms") or [])
            and all(_share(v) for v in (data.get("losses") or {}).values())
            and _rows_sound(data)
            and _launch_sound(data.get("launch"))
            and _amount((data.get("memory_peak") or {}).get("bytes"))
            and all(_amount(v) for v in (data.get("memory_categories") or {}).values())
            and _flops_sound(data.get("flops")))


def _rows_sound(data: dict[str, Any]) -> bool:
    rows_ok = all(_amount(row.get(k)) for key, keys in _ROW_AMOUNTS.items() for row in data.get(key) or []
                  for k in keys)
    return (rows_ok
            and all(_amount(v) for s in data.get("steps") or [] for v in (s.get("causes_ms") or {}).values())
            and all(_share(op.get("fraction")) for op in data.get("top_ops") or [])
            and all(_share(d.get("gpu_utilization")) and all(_share(v) for v in (d.get("losses") or {}).values())
                    for d in data.get("devices") or []))


def _launch_sound(launch: dict[str, Any] | None) -> bool:
    if not launch:
        return True
    return (all(_amount(launch.get(k)) for k in ("p50_us", "p95_us", "launch_call_p50_us", "small_kernels"))
            and _share(launch.get("small_kernel_fraction")))


def _flops_sound(flops: Any) -> bool:
    """Empty, or what ``flops_meta`` makes of it unchanged: positive finite counts, texts (a text count is not)."""
    return not flops or (isinstance(flops, dict) and flops_meta({META_KEY: flops}) == flops)


def _share(value: Any) -> bool:
    return value is None or 0.0 <= value <= 1.0 + SLACK


def _amount(value: Any) -> bool:
    return value is None or 0 <= value <= MAX_AMOUNT


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in ``value`` (dicts and lists walked; a long list of numbers in one pass)."""
    if isinstance(value, (float, int)):
        return isfinite(value) and -MAX_ABS <= value <= MAX_ABS
    if isinstance(value, dict):
        return _all_finite(value.values())
    if isinstance(value, list):
        return _all_finite(value)
    return True


def _all_finite(values: Iterable[Any]) -> bool:
    return all(isfinite(v) and -MAX_ABS <= v <= MAX_ABS if isinstance(v, float) else _finite(v) for v in values)

"""The machine and the loader a trace was recorded with, as far as the advice needs them.

Our callbacks write ``perf_callbacks_machine`` into each window's trace metadata (``core/windows/machine.py``): the CPU
cores the training process could use, the ranks on its machine, the training loader's name and ``num_workers``, and
whether it trained on CUDA. A trace written by other tools has none of it; the advice then says only what the trace
shows.

Example:
    >>> m = machine_of({"perf_callbacks_machine": {"cpu_cores": 16, "local_world_size": 8, "num_workers": 2,
    ...                                            "loader": "train_dataloader", "cuda": True}})
    >>> cores_per_rank(m), m["num_workers"]
    (2, 2)
    >>> machine_of({"perf_callbacks_machine": {"cpu_cores": "many"}})
    {}
    >>> load_of({"perf_callbacks_load": {"wall_ms": 100.0, "run_queue_ms": 40.0, "workers": 0}})["run_queue_ms"]
    40.0
"""

from __future__ import annotations

import math
from typing import Any

META_KEY = "perf_callbacks_machine"
"""The trace metadata key written by the training process (``perf_callbacks.core.windows.machine.META_KEY``)."""
LOAD_KEY = "perf_callbacks_load"
"""The window's measured load (``perf_callbacks.core.timing.worker_load.META_KEY``): the training thread's time on a CPU
and waiting for one, and the DataLoader workers', in milliseconds, over the window's wall time."""
_LOAD_FIELDS = ("run_queue_ms", "ran_ms", "workers_cpu_ms", "workers_run_queue_ms")
_FETCH_FIELDS = ("fetch_ms", "fetch_cpu_ms", "fetch_run_queue_ms", "fetch_ms_p50")


def machine_of(meta: dict[str, Any]) -> dict[str, Any]:
    """The machine entry of a trace's metadata with every field of the right type, or {} (absent or malformed)."""
    raw = meta.get(META_KEY)
    if not isinstance(raw, dict):
        return {}
    cores, local, workers = raw.get("cpu_cores"), raw.get("local_world_size"), raw.get("num_workers")
    if not (_count(cores) and _count(local)) or not (workers is None or _count(workers, 0)):
        return {}
    return {"cpu_cores": cores, "local_world_size": local, "num_workers": workers,
            "loader": str(raw.get("loader", "")), "cuda": raw.get("cuda") is True,
            "cpu_bf16": raw.get("cpu_bf16") is True}


def load_of(meta: dict[str, Any]) -> dict[str, Any]:
    """The window's measured load from a trace's metadata (fields None where not measured), or {} (absent, malformed).

    Keys: ``wall_ms``, ``run_queue_ms``, ``ran_ms`` (the training thread), ``workers`` (how many were measured),
    ``workers_cpu_ms``, ``workers_run_queue_ms`` (together); where the workers' fetches were timed in the workers
    (``core/timing/fetch_clock.py``), ``fetches`` (batches) and ``fetch_ms``, ``fetch_cpu_ms``, ``fetch_run_queue_ms``
    (their fetch time together, on a CPU and waiting for one while fetching) and ``fetch_ms_p50``.
    """
    raw = meta.get(LOAD_KEY)
    if not isinstance(raw, dict) or not _number(raw.get("wall_ms")) or raw["wall_ms"] <= 0 \
            or not _count(raw.get("workers"), 0):
        return {}
    if any(raw.get(k) is not None and not _number(raw.get(k)) for k in _LOAD_FIELDS):
        return {}
    load = {"wall_ms": float(raw["wall_ms"]), "workers": raw["workers"],
            **{k: None if raw.get(k) is None else float(raw[k]) for k in _LOAD_FIELDS}}
    if _count(raw.get("fetches")) and all(_number(raw.get(k)) for k in _FETCH_FIELDS) and raw["fetch_ms"] > 0:
        load.update({"fetches": raw["fetches"], **{k: float(raw[k]) for k in _FETCH_FIELDS}})
    return load


def cores_per_rank(machine: dict[str, Any]) -> int | None:
    """CPU cores per rank on the machine that recorded the trace (at least 1), None when the trace does not say."""
    if not machine:
        return None
    return max(1, int(machine["cpu_cores"]) // max(1, int(machine["local_world_size"])))


def cuda_on_host(meta: dict[str, Any], machine: dict[str, Any], runtime_calls: int) -> bool:
    """Whether the machine had CUDA: it trained on CUDA (our metadata), else the trace lists GPUs or runtime calls."""
    if machine:
        return bool(machine["cuda"])
    props = meta.get("deviceProperties")
    return bool(props) and isinstance(props, list) or runtime_calls > 0


def _count(value: Any, minimum: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0

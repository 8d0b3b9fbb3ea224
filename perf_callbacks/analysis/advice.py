"""Advice shared by the report and the training-time warnings, so that both give the same number for one reason.

Example:
    >>> 1 <= suggest_num_workers() <= 8
    True
    >>> loader_fix(2, cores=2)[:52]
    'num_workers=2 already uses the 2 CPU cores per local'
"""

from __future__ import annotations

import os

WORKERS_RULE = "the CPU cores per local rank, up to 8"
PER_BATCH_FIX = "cut what each batch costs to hand over between processes: larger batches, fewer and larger tensors " \
                "per batch, or in-memory data read in the main process (num_workers=0); or keep the data on the device"
"""What helps a loader whose workers already use every core: the time goes into passing batches, not loading them."""


def available_cpus() -> int:
    """CPU cores this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS
        return os.cpu_count() or 1


def ranks_on_machine() -> int:
    """Ranks on this machine: ``$LOCAL_WORLD_SIZE`` (torchrun, Accelerate), else 1."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1


def suggest_num_workers(local_world_size: int | None = None, cores: int | None = None) -> int:
    """``num_workers`` to try: the CPUs available to this process split across its local ranks, capped at 8.

    Args:
        local_world_size: ranks on this machine; default :func:`ranks_on_machine`.
        cores: CPU cores per local rank, when known (from the trace of another machine); overrides the other.
    """
    if cores is None:
        cores = available_cpus() // max(1, local_world_size or ranks_on_machine())
    return max(1, min(8, cores))


def loader_fix(num_workers: int | None, cores: int | None = None) -> str:
    """What to try for a loader that keeps the step waiting, given its ``num_workers`` and the CPU cores per rank.

    Args:
        num_workers: the loader's setting, None when unknown.
        cores: CPU cores per local rank of the machine that ran it, None when unknown (the advice then names none).
    """
    if num_workers == 0:
        return f"try num_workers={suggest_num_workers(cores=cores)} ({WORKERS_RULE})"
    if num_workers is not None and cores is not None and num_workers >= cores:
        return f"num_workers={num_workers} already uses the {cores} CPU {'core' if cores == 1 else 'cores'} per " \
               f"local rank, so more workers cannot help: {PER_BATCH_FIX}; or make __getitem__ cheaper"
    up_to = f" (up to {cores}, the CPU cores per local rank)" if cores is not None else ""
    return f"raise num_workers{up_to} or prefetch_factor, or make __getitem__ cheaper"

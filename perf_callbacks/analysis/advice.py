"""Advice shared by the report and the training-time warnings, so that both give the same number for one reason.

Example:
    >>> 1 <= suggest_num_workers() <= 8
    True
"""

from __future__ import annotations

import os

WORKERS_RULE = "the CPU cores per local rank, up to 8"


def suggest_num_workers(local_world_size: int | None = None) -> int:
    """``num_workers`` to try: the CPUs available to this process split across its local ranks, capped at 8.

    Args:
        local_world_size: ranks on this machine; default ``$LOCAL_WORLD_SIZE`` (torchrun, Accelerate), else 1.
    """
    if local_world_size is None:
        local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus // max(1, local_world_size)))

"""Advice shared by the report and the training-time warnings, so that both give the same number for one reason.

Example:
    >>> 1 <= suggest_num_workers() <= 8
    True
    >>> loader_fix(2, cores=2)[:52]
    'num_workers=2 already uses the 2 CPU cores per local'
    >>> e = LoaderEvidence(num_workers=2, cores=2, step_ms=10.0, wait_ms=7.0, own_ms=3.0, workers_cpu=0.05,
    ...                    workers_busy=0.06, share=0.7)
    >>> loader_kind(e), fetch_ms(e), workers_to_try(e)
    ('io_wait', 20.0, 9)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

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


BUSY = 0.5
"""Workers runnable (on a CPU, or waiting for one) at least this share of their time are CPU-bound; under it they
mostly wait (storage, network, a sleep), and more of them overlap more waits."""
HEADROOM = 1.25
"""Workers to try: enough to fetch a batch in the step's own time, and a quarter more for the spread of fetches."""
PACE = 0.10
"""Idle workers are said to wait on storage (and more of them to help) only when the data wait reaches a tenth of the
step, the verdict's own bar: under it, a wait of a few ms is the training process taking each batch over (seen at
2-9% on a busy machine with in-memory data that two workers kept well ahead of an 80 ms step)."""
ADVICE_KINDS = ("none", "not_measured", "in_process", "io_wait", "cpu_bound", "cpu_saturated", "handover")


@dataclass(frozen=True)
class LoaderEvidence:
    """What the loader advice rests on: the setting, the machine, and the measured load.

    Args:
        num_workers: the loader's setting (None: unknown).
        cores: CPU cores per local rank (None: unknown).
        step_ms: the median step.
        wait_ms: the median step's data wait.
        own_ms: the median step's own work: its time less its data wait.
        workers_cpu: the share of their time the workers ran on a CPU (None: not measured).
        workers_busy: the share of their time they ran or waited for a CPU (None: not measured).
        main_blocked: the share of the time the training thread neither ran nor waited for a CPU (None: unknown).
        share: the data wait's share of step time.
    """

    num_workers: int | None
    cores: int | None
    step_ms: float
    wait_ms: float
    own_ms: float
    workers_cpu: float | None = None
    workers_busy: float | None = None
    main_blocked: float | None = None
    share: float = 0.0


def loader_kind(e: LoaderEvidence) -> str:
    """Which advice fits a loader that keeps the step waiting (one of ``ADVICE_KINDS`` but ``none``).

    ``in_process``: ``num_workers=0``. ``handover``: the time went into taking batches from the workers, not into
    the workers: the training thread was on a CPU for most of its data wait, or the workers mostly waited and the
    wait is under ``PACE``. ``io_wait``: the workers mostly waited, and the step waited at least ``PACE`` for them.
    ``cpu_bound``: they were busy on the CPU, fewer than the cores. ``cpu_saturated``: busy, at the core count.
    """
    if e.num_workers == 0:
        return "in_process"
    if e.workers_busy is None or e.num_workers is None:
        return "not_measured"
    if e.main_blocked is not None and e.main_blocked < 0.5 * e.share:
        return "handover"
    if e.workers_busy < BUSY:
        return "io_wait" if e.share >= PACE else "handover"
    return "cpu_bound" if e.cores is not None and e.num_workers < e.cores else "cpu_saturated"


def fetch_ms(e: LoaderEvidence) -> float | None:
    """The time one batch takes to fetch: the data wait in-process; else a worker's, ``num_workers`` steps' time.

    With the workers behind (the step waits), each hands over a batch every ``num_workers`` steps. None without a
    measurable wait (under 1 ms, the loop's own work between batches).
    """
    if e.wait_ms < 1.0 or e.num_workers is None:
        return None
    return e.wait_ms if e.num_workers == 0 else e.num_workers * e.step_ms


def workers_to_try(e: LoaderEvidence) -> int:
    """Workers that fetch a batch in the step's own time (the step less its wait), with ``HEADROOM``.

    Never fewer than one more than now; never more than the cores can run at the workers' measured CPU share.
    """
    now = e.num_workers or 0
    fetch, own = fetch_ms(e), max(e.own_ms, 0.1)
    wanted = math.ceil(HEADROOM * fetch / own) if fetch else now + 1
    if e.workers_cpu and e.cores:
        wanted = min(wanted, math.floor(e.cores / e.workers_cpu))
    return max(now + 1, wanted)


def measured_fix(e: LoaderEvidence) -> str:
    """The fix for a loader whose workers' load was measured; :func:`loader_fix` when it was not."""
    kind = loader_kind(e)
    if kind in ("in_process", "not_measured"):
        return loader_fix(e.num_workers, e.cores)
    ran = f"its {e.num_workers} workers ran on a CPU {e.workers_cpu or 0.0:.0%} of the time"
    if kind == "handover":
        return f"{ran} and ran or waited for one {e.workers_busy or 0.0:.0%}, so they kept up; the training thread " \
               f"was blocked {e.main_blocked or 0.0:.0%} of the time: the wait is the training process taking each " \
               f"batch over: {PER_BATCH_FIX}"
    if kind == "io_wait":
        cores = f", even beyond the {e.cores} CPU cores per local rank" if e.cores is not None else ""
        return f"{ran} and waited (storage, network, sleep) the rest, so more workers help{cores}: raise " \
               f"num_workers to {workers_to_try(e)} (a batch takes a worker {fetch_ms(e) or 0.0:.1f} ms, a step's " \
               f"own work {e.own_ms:.1f} ms): num_workers={workers_to_try(e)}, prefetch_factor=4 and " \
               "persistent_workers=True"
    busy = f"{ran} and waited for one {max((e.workers_busy or 0.0) - (e.workers_cpu or 0.0), 0.0):.0%}"
    if kind == "cpu_bound":
        return f"{busy}: raise num_workers up to {e.cores} (the CPU cores per local rank), or make __getitem__ cheaper"
    return f"{busy}: num_workers={e.num_workers} already keeps the {e.cores} CPU cores per local rank busy, so more " \
           "workers cannot help: make __getitem__ cheaper (cache decoded samples), use larger batches, or move the " \
           "work (decoding, augmentation) to the device"

"""Advice shared by the report and the training-time warnings, so that both give the same number for one reason.

Example:
    >>> 1 <= suggest_num_workers() <= 8
    True
    >>> loader_fix(2, cores=2)[:52]
    'num_workers=2 already uses the 2 CPU cores per local'
    >>> e = LoaderEvidence(num_workers=2, cores=2, step_ms=10.0, wait_ms=7.0, own_ms=3.0, workers_cpu=0.05,
    ...                    workers_busy=0.06, share=0.7, fetch_p50_ms=20.0, fetch_cpu=0.05, fetch_busy=0.06)
    >>> loader_kind(e), fetch_ms(e), workers_to_try(e)
    ('io_wait', 20.0, 7)
"""

from __future__ import annotations

import os

from perf_callbacks.analysis.judge.decide import (
    BUSY,
    KINDS,
    PACE,
    LoaderEvidence,
    decide,
    fetch_ms,
    loader_kind,
    workers_to_try,
)

__all__ = ["ADVICE_KINDS", "BUSY", "PACE", "PER_BATCH_FIX", "WORKERS_RULE", "LoaderEvidence", "available_cpus",
           "fetch_ms", "loader_fix", "loader_kind", "measured_fix", "ranks_on_machine", "suggest_num_workers",
           "workers_to_try"]

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


ADVICE_KINDS = KINDS
"""The loader block's ``advice_kind`` values: the rows of :data:`perf_callbacks.analysis.judge.decide.TABLE`."""


def measured_fix(e: LoaderEvidence) -> str:
    """The fix the decision table (:mod:`perf_callbacks.analysis.judge.decide`) gives ``e``, with its figures."""
    d = decide(e)
    kind, n = d.kind, d.workers
    if kind == "not_measured" or (kind == "in_process" and n is None):
        return loader_fix(e.num_workers, e.cores)
    per = f"(a batch takes {d.fetch_ms or 0.0:.1f} ms to fetch, a step's own work {e.own_ms:.1f} ms)"
    if kind == "in_process":
        return f"try num_workers={n} {per}"
    if kind == "one_core":
        return "the training thread fetched its batches itself on the one CPU core per local rank, where a worker " \
               "would share that core: make __getitem__ cheaper (cache decoded samples) or give the rank more cores"
    of = "of their fetch time" if e.timed else "of the time"
    ran = f"its {e.num_workers} workers ran on a CPU {e.cpu_share or 0.0:.0%} {of}"
    if kind == "handover" and e.timed and (e.main_blocked is None or e.main_blocked >= 0.5 * e.share):
        return f"its {e.num_workers} workers fetch a batch in {e.fetch_p50_ms or 0.0:.1f} ms (timed in the " \
               f"workers), one every {(e.fetch_p50_ms or 0.0) / max(e.num_workers or 1, 1):.1f} ms together, " \
               f"well within the step's own work of {e.own_ms:.1f} ms: they keep ahead, and the wait is the training " \
               f"process taking each batch over (or waiting for a CPU): {PER_BATCH_FIX}"
    if kind == "handover":
        return f"{ran} and ran or waited for one {e.busy_share or 0.0:.0%}, so they kept up; the training thread " \
               f"was blocked {e.main_blocked or 0.0:.0%} of the time: the wait is the training process taking each " \
               f"batch over: {PER_BATCH_FIX}"
    if kind == "io_wait":
        more = f"raise num_workers to {n} {per}: num_workers={n}, prefetch_factor=4 and persistent_workers=True" \
            if n is not None else f"num_workers={e.num_workers} is already as many as is sane: prefetch_factor=4, " \
                                  "persistent_workers=True, or faster storage (local copies, a cache)"
        return f"{ran} and were blocked (storage, network, sleep) {1 - (e.busy_share or 0.0):.0%} {of}, so more " \
               f"workers overlap more waits, beyond the cores: {more}"
    busy = f"{ran} and waited for one {max((e.busy_share or 0.0) - (e.cpu_share or 0.0), 0.0):.0%}"
    if kind in ("cpu_bound", "mixed") and n is not None:
        return f"{busy}: raise num_workers to {n} {per}, up to {e.cores} (the CPU cores per local rank), or make " \
               "__getitem__ cheaper"
    return f"{busy}: num_workers={e.num_workers} already keeps the {e.cores} CPU cores per local rank busy, so more " \
           "workers cannot help: make __getitem__ cheaper (cache decoded samples), use larger batches, run fewer " \
           "torch threads in the workers, or move the work (decoding, augmentation) to the device"

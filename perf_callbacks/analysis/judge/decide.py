"""The loader advice as one decision table: measured evidence in, one kind of advice, a number and its gain out.

Every loader advice the report and the live warning give comes from :data:`TABLE` (written down in
``docs/reference/loader.md``): the first row whose condition holds decides. Its inputs are
measured: the setting (``num_workers``, the cores per rank), the median step and its data wait, the workers' median
fetch and the share of their fetch time they ran on a CPU, waited for one (runnable) or were blocked (I/O, a sleep),
timed in the workers (``core/timing/fetch_clock.py``). A worker idle on its queue, ahead of the training loop, is not
fetching: only where the fetches could not be timed (workers started by ``spawn``) do the rows fall back to the share of
all the workers' time, from schedstat, which counts that idle time as blocked.

Two rules keep the same evidence to the same first advice from run to run:

- the rows test thresholds with a band (``BAND``) where two rows meet: workers runnable between ``BUSY - BAND`` and
  ``BUSY + BAND`` of their time are ``mixed``, and get the advice both neighbours agree on (more workers, up to the
  cores), not one that flips with the noise;
- how many workers: ``ceil(fetch / step work)`` (the workers it takes to fetch a batch in the step's own time), at
  least one more than now, capped by the cores per rank; blocked workers overlap their waits beyond the cores, up to
  what the cores can run at their measured CPU share, and never over ``MAX_WORKERS``. Workers that were blocked are
  never told "fewer workers".

The gain of more workers is what the measured figures imply: the step cannot go below its own work, nor below the
fetch spread over the workers, so the step becomes ``max(work, fetch / workers)`` at best: an upper bound.

Example:
    >>> e = LoaderEvidence(num_workers=0, cores=2, step_ms=91.0, wait_ms=85.0, own_ms=6.0)
    >>> d = decide(e)
    >>> d.kind, d.workers, round(d.gain_ms or 0, 1), round(d.gain_fraction or 0, 2)
    ('in_process', 2, 48.5, 0.53)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

BUSY = 0.5
"""Workers runnable (on a CPU, or waiting for one) at least this share of their time are CPU-bound; under it they
mostly wait (storage, network, a sleep), and more of them overlap more waits."""
BAND = 0.1
"""Around ``BUSY``: workers runnable within ``BUSY +/- BAND`` of their time are ``mixed`` (no flip with the noise)."""
PACE = 0.10
"""Idle workers are said to wait on storage (and more of them to help) only when the data wait reaches a tenth of the
step, the verdict's own bar: under it, a wait of a few ms is the training process taking each batch over (seen at
2-9% on a busy machine with in-memory data that two workers kept well ahead of an 80 ms step)."""
AHEAD = 0.75
"""Workers whose timed fetch, spread over them, is under this share of the step's own work keep ahead of the loop: even
a step a quarter shorter than the median finds its batch ready, so a wait is not the fetch. Nearer the step's own work,
the loader barely keeps up and its jitter is waited for: the rows below apply (an adapter test on a machine at a
load of 10 saw a 344 ms fetch over 2 workers against 180 ms of step work, 16% of the step waiting)."""
MAX_WORKERS = 16
"""Never more workers than this, however long the fetch: each holds a copy of the dataset object and a process."""
UNKNOWN_CORES = 8
"""The cap where the cores per rank are not known (a trace without our metadata)."""
MIN_FETCH_MS = 1.0
"""A wait under this (the live check's floor) is the loop's own work between batches: no fetch time is derived."""


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
        fetch_p50_ms: the median batch fetch, timed in the workers (None: not timed).
        fetch_cpu: the share of their fetch time the workers ran on a CPU (None: not timed).
        fetch_busy: the share of their fetch time they ran or waited for a CPU; the rest they were blocked while
            fetching (None: not timed). Where timed, these replace ``workers_cpu`` and ``workers_busy``, which count a
            worker idle on its queue (ahead of the training loop) as blocked.
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
    fetch_p50_ms: float | None = None
    fetch_cpu: float | None = None
    fetch_busy: float | None = None

    @property
    def timed(self) -> bool:
        """Whether the workers' fetches were timed in the workers."""
        return self.fetch_p50_ms is not None and self.fetch_busy is not None

    @property
    def cpu_share(self) -> float | None:
        """The workers' share on a CPU: of their fetch time where timed, else of all their time."""
        return self.fetch_cpu if self.timed else self.workers_cpu

    @property
    def busy_share(self) -> float | None:
        """The workers' share runnable: of their fetch time where timed, else of all their time (idle counts)."""
        return self.fetch_busy if self.timed else self.workers_busy


class Row(NamedTuple):
    """One row of the decision table: its advice kind, when it applies, what it advises, and how many workers."""

    kind: str
    when: str
    advice: str
    workers: str


TABLE: tuple[Row, ...] = (
    Row("not_measured", "the workers' load is unknown (not Linux, no metadata)",
        "raise num_workers up to the cores per rank, or make __getitem__ cheaper", "up to the cores"),
    Row("one_core", "num_workers=0 on one CPU core per rank",
        "a worker would share the one core: make __getitem__ cheaper, or give the rank more cores", "none"),
    Row("in_process", "num_workers=0 on more than one core per rank",
        "start workers, persistent_workers=True", "ceil(fetch / step work), up to the cores"),
    Row("handover", "workers with their load measured; the training thread was on a CPU through most of its wait",
        "cut what a batch costs to hand over: larger batches, fewer and larger tensors", "none"),
    Row("handover", f"workers' fetches timed: the median fetch over num_workers is under {AHEAD:.0%} of the step's "
        "own work (the workers keep ahead; the wait is not the fetch)", "cut what a batch costs to hand over", "none"),
    Row("handover", f"workers runnable under {BUSY - BAND:.0%} of their time, the step waited under {PACE:.0%}",
        "cut what a batch costs to hand over", "none"),
    Row("not_measured", f"workers' fetches not timed (started by spawn), runnable under {BUSY - BAND:.0%} of their "
        "time: blocked, or idle on their queue (schedstat alone cannot tell); no word of storage",
        "raise num_workers up to the cores per rank, or make __getitem__ cheaper", "up to the cores"),
    Row("io_wait", f"workers runnable under {BUSY - BAND:.0%} of their fetch time (blocked: I/O, sleep, IPC), the step "
        f"waited at least {PACE:.0%}; timed in the workers",
        "more workers, beyond the cores; prefetch_factor, persistent_workers",
        f"ceil(fetch / step work), up to cores / their CPU share and {MAX_WORKERS}"),
    Row("mixed", f"workers runnable {BUSY - BAND:.0%}-{BUSY + BAND:.0%} of their time",
        "more workers, up to the cores", "ceil(fetch / step work), up to the cores"),
    Row("cpu_bound", f"workers runnable over {BUSY + BAND:.0%}, fewer workers than cores",
        "more workers, up to the cores, or cheaper __getitem__", "ceil(fetch / step work), up to the cores"),
    Row("cpu_saturated", f"workers runnable over {BUSY + BAND:.0%}, as many workers as cores or more",
        "cheaper __getitem__, larger batches, fewer torch threads, work moved to the device", "none"),
)
"""The loader decision table, first matching row first (``docs/reference/loader.md``)."""
KINDS = ("none", *dict.fromkeys(row.kind for row in TABLE))


@dataclass(frozen=True)
class Decision:
    """The table's answer: the advice kind, the workers to try (None: no worker advice) and the gain it implies.

    Args:
        kind: the row's kind (:data:`KINDS`).
        workers: ``num_workers`` to try, None when the row gives no worker advice.
        fetch_ms: the batch's fetch time the number rests on (None: not measured).
        gain_ms: the step time the advice can save at most (None: not estimated).
        gain_fraction: ``gain_ms`` over the median step.
    """

    kind: str
    workers: int | None
    fetch_ms: float | None
    gain_ms: float | None = None
    gain_fraction: float | None = None


def loader_kind(e: LoaderEvidence) -> str:
    """The kind of the first row of :data:`TABLE` that ``e`` meets."""
    if e.num_workers == 0:
        return "one_core" if e.cores is not None and e.cores <= 1 else "in_process"
    busy = e.busy_share
    if busy is None or e.num_workers is None:
        return "not_measured"
    if e.main_blocked is not None and e.main_blocked < 0.5 * e.share:
        return "handover"
    if e.timed and (e.fetch_p50_ms or 0.0) / e.num_workers <= AHEAD * e.own_ms:  # they deliver well ahead
        return "handover"
    if busy < BUSY - BAND:  # untimed, blocked and idle on the queue are one figure: no word of storage
        return "handover" if e.share < PACE else "io_wait" if e.timed else "not_measured"
    if busy < BUSY + BAND:
        return "mixed"
    return "cpu_bound" if e.cores is not None and e.num_workers < e.cores else "cpu_saturated"


def fetch_ms(e: LoaderEvidence) -> float | None:
    """The time one batch takes to fetch, from what was measured; None under ``MIN_FETCH_MS`` of wait.

    Timed in the workers: their median fetch. In-process the training thread fetched itself: the median step's data
    wait. With workers not timed (started by ``spawn`` or a forkserver) that keep the step waiting, each worker hands
    over one batch per round of ``num_workers`` steps and starts the next at once, so the gap between its batches,
    ``num_workers`` median steps, stands for its fetch time (an upper bound: it holds only while they never idle).
    """
    if e.timed and e.num_workers:
        return e.fetch_p50_ms
    if e.wait_ms < MIN_FETCH_MS or e.num_workers is None:
        return None
    return e.wait_ms if e.num_workers == 0 else e.num_workers * e.step_ms


def workers_to_try(e: LoaderEvidence) -> int | None:
    """``num_workers`` to try for ``e`` (None: its row gives no worker advice); see the module's rule."""
    kind = loader_kind(e)
    if kind in ("one_core", "handover", "cpu_saturated"):
        return None
    now, fetch = e.num_workers or 0, fetch_ms(e)
    wanted = math.ceil(fetch / max(e.own_ms, 0.1)) if fetch else now + 1
    cap = UNKNOWN_CORES if e.cores is None else MAX_WORKERS if kind == "io_wait" else min(MAX_WORKERS, e.cores)
    if kind == "io_wait" and e.cpu_share and e.cores:  # as many as the cores can run at their CPU share
        cap = min(cap, max(e.cores, math.floor(e.cores / e.cpu_share)))
    if kind == "not_measured" and e.cores is not None and now >= e.cores:
        return None
    return max(now + 1, min(wanted, cap)) if now < cap else None


def decide(e: LoaderEvidence) -> Decision:
    """The row, the workers to try and the gain they imply (``max(work, fetch / workers)`` at best: an upper bound)."""
    kind, workers, fetch = loader_kind(e), workers_to_try(e), fetch_ms(e)
    if workers is None or fetch is None or e.step_ms <= 0:
        return Decision(kind, workers, fetch)
    best = max(e.own_ms, fetch / workers)
    gain = max(0.0, min(e.step_ms - best, e.wait_ms))
    return Decision(kind, workers, fetch, gain, gain / e.step_ms)

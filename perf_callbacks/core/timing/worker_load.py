"""How busy the DataLoader's workers and the training thread were between two marks, read from Linux's ``/proc``.

A loader that keeps the step waiting is slow for one of three reasons, and each wants a different fix: its workers
wait (on storage, the network, a sleep) and more of them help, beyond the core count; its workers are busy on the CPU
at the core count and more cannot help; or the process waits for a CPU that other processes hold. The kernel says
which: per task, ``/proc/<pid>/schedstat`` holds the nanoseconds it ran and the nanoseconds it waited, runnable, for a
CPU. The workers are the children of this process that torch names ``pt_data_worker``.

A mark costs a few file reads (tens of microseconds with a few workers): it is taken at window boundaries and logging
steps only, never per step. Where ``/proc`` does not say (not Linux, workers started by a forkserver), a figure is None:
"not measured".

Example:
    >>> probe = LoadProbe(num_workers=0)  # a loader without workers: no worker is read
    >>> load = probe.since(probe.mark())
    >>> load.wall_s >= 0.0, load.workers_cpu_fraction is None
    (True, True)
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from perf_callbacks.core.timing.cpu_wait import ThreadWait
from perf_callbacks.core.timing.fetch_clock import Fetches, FetchMark, active

META_KEY = "perf_callbacks_load"
"""The trace's top-level metadata key (``perf_callbacks.analysis.trace.machine.LOAD_KEY``)."""
WORKER_NAME = "pt_data_worker"
"""The name torch gives a DataLoader worker process (``torch.utils.data._utils.worker``)."""

Sched = tuple[float, float]
"""(seconds on a CPU, seconds waiting for one) of a task since it started."""


@dataclass(frozen=True)
class LoadMark:
    """The counters at one moment: when, the training thread's and each worker's.

    Args:
        t: ``time.perf_counter()``.
        thread: the marking thread's ident.
        own: that thread's counters, None where the kernel does not say.
        workers: pid -> counters, of the workers found.
        fetches: the workers' fetch totals (``core/timing/fetch_clock.py``), None where not timed.
    """

    t: float
    thread: int
    own: Sched | None
    workers: dict[int, Sched]
    fetches: FetchMark | None = None


@dataclass(frozen=True)
class Load:
    """What happened between two marks (seconds); None: not measured.

    Args:
        wall_s: between the marks.
        run_queue_s: the training thread's wait for a CPU (runnable, not running).
        ran_s: the training thread's time on a CPU.
        workers: workers measured (0: none found).
        workers_cpu_s: their time on a CPU, together.
        workers_run_queue_s: their wait for a CPU, together.
        fetches: the batches the workers fetched, timed in the workers (None: not timed, or none fetched).
    """

    wall_s: float
    run_queue_s: float | None = None
    ran_s: float | None = None
    workers: int = 0
    workers_cpu_s: float | None = None
    workers_run_queue_s: float | None = None
    fetches: Fetches | None = None

    @property
    def contention(self) -> float | None:
        """The share of the time the training thread waited for a CPU."""
        return None if self.run_queue_s is None or self.wall_s <= 0 else min(1.0, self.run_queue_s / self.wall_s)

    @property
    def workers_cpu_fraction(self) -> float | None:
        """The share of their time the workers ran on a CPU (1.0: each ran all the time)."""
        if self.workers_cpu_s is None or not self.workers or self.wall_s <= 0:
            return None
        return min(1.0, self.workers_cpu_s / (self.workers * self.wall_s))

    @property
    def workers_busy(self) -> float | None:
        """The share of their time the workers ran or waited for a CPU (runnable): under half, they mostly waited."""
        if self.workers_cpu_fraction is None or self.workers_cpu_s is None:
            return None
        return min(1.0, (self.workers_cpu_s + (self.workers_run_queue_s or 0.0)) / (self.workers * self.wall_s))

    @property
    def blocked(self) -> float | None:
        """The share of the time the training thread neither ran nor waited for a CPU (I/O, a queue, a sleep)."""
        if self.ran_s is None or self.run_queue_s is None or self.wall_s <= 0:
            return None
        return max(0.0, 1.0 - (self.ran_s + self.run_queue_s) / self.wall_s)

    def meta(self) -> dict[str, Any]:
        """The trace metadata entry: milliseconds, None where not measured.

        With the fetches timed in the workers: ``fetches`` (batches), ``fetch_ms`` (their fetch time together),
        ``fetch_cpu_ms`` and ``fetch_run_queue_ms`` (on a CPU, waiting for one, while fetching), ``fetch_ms_p50``.
        """
        f = self.fetches
        return {"wall_ms": _ms(self.wall_s), "run_queue_ms": _ms(self.run_queue_s), "ran_ms": _ms(self.ran_s),
                "workers": self.workers, "workers_cpu_ms": _ms(self.workers_cpu_s),
                "workers_run_queue_ms": _ms(self.workers_run_queue_s),
                **({} if f is None else {"fetches": f.count, "fetch_ms": _ms(f.wall_s), "fetch_cpu_ms": _ms(f.cpu_s),
                                         "fetch_run_queue_ms": _ms(f.run_queue_s), "fetch_ms_p50": _ms(f.p50_s)})}


class LoadProbe:
    """Marks and the load between them.

    Args:
        num_workers: the training loader's ``num_workers`` when known: 0 reads no worker; with more workers found (a
            validation loader's persistent ones), the busiest ``num_workers`` are counted.
    """

    def __init__(self, num_workers: int | None = None) -> None:
        self.num_workers = num_workers

    def mark(self) -> LoadMark:
        """The counters now (call on the training thread)."""
        pids = worker_pids() if self.num_workers != 0 else []
        timed = active() if self.num_workers != 0 else None
        return LoadMark(time.perf_counter(), threading.get_ident(), _own_sched(),
                        {pid: s for pid in pids if (s := read_sched(f"/proc/{pid}/schedstat"))},
                        None if timed is None else timed[0].mark(timed[1]))

    def since(self, start: LoadMark) -> Load:
        """The load from ``start`` to now (on the thread that took ``start``: else the thread's figures are None)."""
        return self.between(start, self.mark())

    def between(self, start: LoadMark, end: LoadMark) -> Load:
        """The load from ``start`` to ``end``; a worker that started in between counts from its start."""
        own = (end.own[0] - start.own[0], end.own[1] - start.own[1]) if (
            start.own and end.own and start.thread == end.thread) else None
        deltas = sorted(((s[0] - start.workers.get(p, (0.0, 0.0))[0], s[1] - start.workers.get(p, (0.0, 0.0))[1])
                         for p, s in end.workers.items()), key=lambda d: -(d[0] + d[1]))
        if self.num_workers is not None:
            deltas = deltas[:self.num_workers]
        timed = active()
        fetches = timed[0].between(start.fetches, end.fetches) if (
            timed is not None and start.fetches is not None and end.fetches is not None) else None
        return Load(max(end.t - start.t, 0.0), own[1] if own else None, own[0] if own else None, len(deltas),
                    sum(d[0] for d in deltas) if deltas else None, sum(d[1] for d in deltas) if deltas else None,
                    fetches)


_THREADS = threading.local()


def _own_sched() -> Sched | None:
    """The calling thread's ``(ran, waited)`` from a file kept open per thread: one ``pread``, no open each time."""
    reader = getattr(_THREADS, "reader", None)
    if reader is None:
        reader = _THREADS.reader = ThreadWait()
    return reader.sched()


def read_sched(path: str) -> Sched | None:
    """(ran, waited) seconds from a ``schedstat`` file; None where it cannot be read."""
    try:
        with open(path, "rb") as f:
            ran, waited = f.read().split()[:2]
        return int(ran) / 1e9, int(waited) / 1e9
    except (OSError, ValueError):
        return None


def worker_pids() -> list[int]:
    """The DataLoader workers of this process: its children named ``pt_data_worker`` (the training thread's first)."""
    pids = [p for p in _children("/proc/thread-self/children") if _is_worker(p)]
    if pids:
        return pids
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return []
    return [p for t in tasks for p in _children(f"/proc/self/task/{t}/children") if _is_worker(p)]


def _children(path: str) -> list[int]:
    try:
        with open(path, "rb") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().strip() == WORKER_NAME.encode()
    except OSError:
        return False


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(max(seconds, 0.0) * 1e3, 3)

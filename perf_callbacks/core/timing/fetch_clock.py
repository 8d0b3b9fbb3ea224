"""How long the DataLoader's workers took to fetch each batch, measured in the workers and read by the training process.

A worker's time has three parts the kernel alone cannot tell apart: fetching a batch on a CPU, blocked while
fetching it (storage, the network, a sleep), and idle on its queue because it is ahead of the training loop
(``schedstat`` counts both of the last two as "not runnable"). Only the fetch itself says which: the worker's
fetcher (``torch.utils.data._utils.fetch``) is timed in the worker process, around each batch it fetches: the wall
time, and the worker thread's time on a CPU and waiting for one (its ``schedstat``) over the same span. Blocked while
fetching is the rest of the fetch; the time between fetches is idle, not blocked.

Each worker writes its running totals and its last ``RING`` fetch times into a slot of a shared anonymous memory
map, created when the engine starts (:func:`prepare`, before the workers do) and inherited by them at ``fork``, where
an ``os.register_at_fork`` hook wraps the child's fetchers; the user's loader and its ``worker_init_fn`` are left as
they are. Workers started by ``spawn`` or a forkserver inherit neither: their fetches are not timed, and the figures
are None. The training process reads the totals only when it marks its load (window boundaries, logging steps), never
per step; a worker spends a few microseconds a batch on it.

Example:
    >>> clock = FetchClock(2)
    >>> clock.record(0, 0.010, 0.002, 0.001)  # what a worker writes after one fetch (seconds)
    >>> start = FetchMark((0, 0), (0.0, 0.0, 0.0))
    >>> f = clock.since(start)
    >>> f.count, round(f.p50_s, 3), round(f.blocked_fraction, 2)
    (1, 0.01, 0.7)
"""

from __future__ import annotations

import contextlib
import mmap
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perf_callbacks.core.timing.cpu_wait import ThreadWait

SLOTS = 64
"""Workers measured: a worker whose id is this or more is not timed."""
RING = 128
"""Fetch times each worker keeps for the median (the last ``RING`` between two marks)."""
_HEAD = 4  # count, wall, ran, waited (seconds)
_WIDTH = _HEAD + RING


@dataclass(frozen=True)
class FetchMark:
    """The workers' fetch totals at one moment: fetches per slot, and ``(wall, ran, waited)`` seconds together."""

    counts: tuple[int, ...]
    sums: tuple[float, float, float]


@dataclass(frozen=True)
class Fetches:
    """The batches the workers fetched between two marks, and how.

    Args:
        count: batches fetched.
        wall_s: their fetch time, together.
        cpu_s: the workers' time on a CPU while fetching them.
        run_queue_s: the workers' wait for a CPU while fetching them.
        p50_s: the median fetch (of the last ``RING`` per worker).
    """

    count: int
    wall_s: float
    cpu_s: float
    run_queue_s: float
    p50_s: float

    @property
    def blocked_fraction(self) -> float:
        """The share of the fetch time the workers were blocked (neither on a CPU nor waiting for one)."""
        return max(0.0, 1.0 - (self.cpu_s + self.run_queue_s) / self.wall_s) if self.wall_s > 0 else 0.0


class FetchClock:
    """The shared slots the workers write and the training process reads, behind a header naming the loader.

    Args:
        slots: workers kept (``SLOTS``).
    """

    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        self._map = mmap.mmap(-1, 8 + slots * _WIDTH * 8)  # anonymous, MAP_SHARED: a forked child writes here
        view = memoryview(self._map)
        self._head = view[:8].cast("q")  # the id of the training loader's dataset, 0: none
        self._cells = view[8:].cast("d")

    @property
    def dataset(self) -> int:
        """``id()`` of the dataset whose workers write here (0: none).

        A worker forked from this process sees the object at the same address.
        """
        return int(self._head[0])

    @dataset.setter
    def dataset(self, ident: int) -> None:
        self._head[0] = ident

    def record(self, slot: int, wall: float, ran: float, waited: float) -> None:
        """One fetch by the worker in ``slot`` (seconds): its time last into the ring, the count after it."""
        if not 0 <= slot < self.slots:
            return
        c, base = self._cells, slot * _WIDTH
        n = int(c[base])
        c[base + _HEAD + n % RING] = wall
        c[base + 1] += wall
        c[base + 2] += ran
        c[base + 3] += waited
        c[base] = n + 1

    def mark(self, workers: int | None = None) -> FetchMark:
        """The totals now, of the first ``workers`` slots (all by default): a few reads per worker."""
        c = self._cells
        bases = range(0, min(workers or self.slots, self.slots) * _WIDTH, _WIDTH)
        return FetchMark(tuple(int(c[b]) for b in bases),
                         (sum(c[b + 1] for b in bases), sum(c[b + 2] for b in bases), sum(c[b + 3] for b in bases)))

    def since(self, start: FetchMark) -> Fetches | None:
        """The fetches since ``start``; None when none finished."""
        return self.between(start, self.mark(len(start.counts)))

    def between(self, start: FetchMark, end: FetchMark) -> Fetches | None:
        """The fetches from ``start`` to ``end`` (the median from the rings as they are now); None: none finished."""
        count = sum(end.counts) - sum(start.counts)
        if count <= 0 or len(start.counts) != len(end.counts):
            return None
        c, times = self._cells, []
        for slot, (a, b) in enumerate(zip(start.counts, end.counts, strict=True)):
            base = slot * _WIDTH + _HEAD
            times += [c[base + i % RING] for i in range(max(a, b - RING), b)]
        wall, ran, waited = (max(e - s, 0.0) for e, s in zip(end.sums, start.sums, strict=True))
        return Fetches(count, wall, ran, waited, statistics.median(times) if times else wall / count)


_CLOCK: list[FetchClock] = []  # the process's one clock, made before the workers fork
_ACTIVE: list[int] = []  # the training loader's num_workers while its fetches are timed


def prepare() -> FetchClock | None:
    """Make the clock and have every child forked from now on time its fetches (once per process; never raises).

    Call before the training loader starts its workers (Lightning starts them before ``on_train_start``): the map is
    inherited at ``fork``, and the child's fetchers are wrapped by ``os.register_at_fork``. A child that is no worker
    of the training loader (a validation loader's, a user's process) fetches as before: a wrapped fetch that finds
    another dataset, or no worker info, is not timed.
    """
    if _CLOCK:
        return _CLOCK[0]
    try:
        clock = FetchClock()
        os.register_at_fork(after_in_child=lambda: _in_child(clock))
    except (AttributeError, OSError, ValueError):  # no fork (Windows), no shared map
        return None
    _CLOCK.append(clock)
    return clock


def _in_child(clock: FetchClock) -> None:
    with contextlib.suppress(Exception):  # instrumentation never breaks a child
        time_fetcher(clock)


def time_fetcher(clock: FetchClock) -> None:
    """In a child process: wrap the fetchers' ``fetch``, each batch a training-loader worker fetches timed.

    Written to the worker's slot (its worker id).
    """
    import sys

    fetchers = sys.modules.get("torch.utils.data._utils.fetch")  # loaded by the parent's DataLoader already
    if fetchers is None:
        return
    waited = ThreadWait()  # the run-queue delay: counted when the thread gets a CPU back, so within the fetch
    for cls in (fetchers._MapDatasetFetcher, fetchers._IterableDatasetFetcher):
        original = cls.fetch
        if not getattr(original, "_perf_timed", False):
            cls.fetch = _timed(original, clock, waited)


def _timed(original: Callable[..., Any], clock: FetchClock, waited: Callable[[], float | None]) -> Callable[..., Any]:
    """``original`` timed: the wall clock, the thread's CPU clock and its run-queue delay.

    The CPU clock, not ``schedstat``'s run time: that of a running thread lags by up to a scheduler tick, longer than
    a fetch from memory.
    """
    from torch.utils.data import get_worker_info

    def fetch(self: Any, index: Any) -> Any:
        info = get_worker_info()
        if info is None or id(info.dataset) != clock.dataset:
            return original(self, index)
        t0, c0, w0 = time.perf_counter(), time.thread_time(), waited()
        data = original(self, index)  # an exception (StopIteration at an iterable's end) is no fetch
        try:
            c1, w1, wall = time.thread_time(), waited(), time.perf_counter() - t0
            if w0 is not None and w1 is not None:
                clock.record(info.id, wall, c1 - c0, w1 - w0)
        except Exception:  # noqa: BLE001 - instrumentation never breaks a worker
            pass
        return data

    fetch._perf_timed = True  # type: ignore[attr-defined]
    return fetch


def attach(loader: Any) -> FetchClock | None:
    """Time the fetches of the workers of ``loader`` (the training loader), those forked since :func:`prepare` too.

    A loader without workers, or not a ``torch.utils.data.DataLoader``, gets none: the fetch is then not measured.
    """
    from torch.utils.data import DataLoader

    _ACTIVE.clear()
    clock = prepare()
    if clock is None or not isinstance(loader, DataLoader) or not loader.num_workers:
        if clock is not None:
            clock.dataset = 0
        return None
    clock.dataset = id(loader.dataset)
    _ACTIVE.append(loader.num_workers)
    return clock


def active() -> tuple[FetchClock, int] | None:
    """The clock and the training loader's ``num_workers`` while its fetches are timed (:func:`attach`), else None."""
    return (_CLOCK[0], _ACTIVE[0]) if _CLOCK and _ACTIVE else None

"""How long the DataLoader's workers took to fetch each batch, measured in the workers and read by the training process.

A worker's time has three parts the kernel alone cannot tell apart: fetching a batch on a CPU, blocked while
fetching it (storage, the network, a sleep), and idle on its queue because it is ahead of the training loop
(``schedstat`` counts both of the last two as "not runnable"). Only the fetch itself says which: the worker's
fetcher (``torch.utils.data._utils.fetch``) is timed in the worker process, around each batch it fetches: the wall
time, and the worker thread's time on a CPU and waiting for one (its ``schedstat``) over the same span. Blocked while
fetching is the rest of the fetch; the time between fetches is idle, not blocked.

Each worker writes its running totals and its last ``RING`` fetch times into a slot of a shared anonymous memory
map, created before the workers start and inherited by them at ``fork`` (workers started by ``spawn`` or a
forkserver do not inherit it: their fetches are not measured, and the figures are None). The training process reads
the totals only when it marks its load (window boundaries, logging steps), never per step; a worker spends a few
microseconds a batch on it.

Example:
    >>> clock = FetchClock(2)
    >>> clock.record(0, 0.010, 0.002, 0.001)  # what a worker writes after one fetch (seconds)
    >>> start = FetchMark((0, 0), (0.0, 0.0, 0.0))
    >>> f = clock.since(start)
    >>> f.count, round(f.p50_s, 3), round(f.blocked_fraction, 2)
    (1, 0.01, 0.7)
"""

from __future__ import annotations

import mmap
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
    """The shared slots the workers write and the training process reads.

    Args:
        workers: the loader's ``num_workers`` (slots past ``SLOTS`` are not kept).
    """

    def __init__(self, workers: int) -> None:
        self.workers = max(1, min(workers, SLOTS))
        self._map = mmap.mmap(-1, self.workers * _WIDTH * 8)  # anonymous, MAP_SHARED: a forked child writes here
        self._cells = memoryview(self._map).cast("d")

    def record(self, slot: int, wall: float, ran: float, waited: float) -> None:
        """One fetch by the worker in ``slot`` (seconds): its time last into the ring, the count after it."""
        if not 0 <= slot < self.workers:
            return
        c, base = self._cells, slot * _WIDTH
        n = int(c[base])
        c[base + _HEAD + n % RING] = wall
        c[base + 1] += wall
        c[base + 2] += ran
        c[base + 3] += waited
        c[base] = n + 1

    def mark(self) -> FetchMark:
        """The totals now (a few reads per worker)."""
        c = self._cells
        bases = range(0, self.workers * _WIDTH, _WIDTH)
        return FetchMark(tuple(int(c[b]) for b in bases),
                         (sum(c[b + 1] for b in bases), sum(c[b + 2] for b in bases), sum(c[b + 3] for b in bases)))

    def since(self, start: FetchMark) -> Fetches | None:
        """The fetches since ``start``; None when none finished."""
        return self.between(start, self.mark())

    def between(self, start: FetchMark, end: FetchMark) -> Fetches | None:
        """The fetches from ``start`` to ``end`` (the median from the rings as they are now); None when none finished."""
        count = sum(end.counts) - sum(start.counts)
        if count <= 0:
            return None
        c, times = self._cells, []
        for slot, (a, b) in enumerate(zip(start.counts, end.counts, strict=False)):
            base = slot * _WIDTH + _HEAD
            times += [c[base + i % RING] for i in range(max(a, b - RING), b)]
        wall, ran, waited = (max(e - s, 0.0) for e, s in zip(end.sums, start.sums, strict=True))
        return Fetches(count, wall, ran, waited, statistics.median(times) if times else wall / count)


class TimedInit:
    """A loader's ``worker_init_fn``: times the worker's fetches into ``clock``, then calls the user's own.

    Args:
        clock: where the worker writes (None once pickled for ``spawn``: the map does not travel).
        user: the loader's ``worker_init_fn`` before, or None.
    """

    def __init__(self, clock: FetchClock | None, user: Callable[[int], Any] | None) -> None:
        self.clock, self.user = clock, user

    def __call__(self, worker_id: int) -> None:
        """In the worker: time its fetcher (never raises for that), then the user's ``worker_init_fn``."""
        if self.clock is not None:
            try:
                time_fetcher(self.clock, worker_id)
            except Exception:  # noqa: BLE001 - instrumentation never breaks a worker
                pass
        if self.user is not None:
            self.user(worker_id)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for a spawned worker: only the user's function goes (the map is this process's)."""
        return {"clock": None, "user": self.user}


def time_fetcher(clock: FetchClock, slot: int) -> None:
    """In a worker process: wrap the fetchers' ``fetch`` so that each batch's fetch is written to ``slot``."""
    from torch.utils.data._utils import fetch as fetchers

    waited = ThreadWait()  # the run-queue delay: counted when the thread gets a CPU back, so within the fetch
    for cls in (fetchers._MapDatasetFetcher, fetchers._IterableDatasetFetcher):
        original = cls.fetch
        if getattr(original, "_perf_timed", False):
            continue
        cls.fetch = _timed(original, clock, slot, waited)  # type: ignore[method-assign]


def _timed(original: Callable[..., Any], clock: FetchClock, slot: int,
           waited: Callable[[], float | None]) -> Callable[..., Any]:
    """``original`` timed: the wall clock, the thread's CPU clock (exact: ``schedstat``'s run time of a running
    thread lags by up to a scheduler tick, longer than a fetch from memory) and its run-queue delay."""
    def fetch(self: Any, index: Any) -> Any:
        t0, c0, w0 = time.perf_counter(), time.thread_time(), waited()
        data = original(self, index)  # an exception (StopIteration at an iterable's end) is no fetch
        try:
            c1, w1, wall = time.thread_time(), waited(), time.perf_counter() - t0
            if w0 is not None and w1 is not None:
                clock.record(slot, wall, c1 - c0, w1 - w0)
        except Exception:  # noqa: BLE001 - instrumentation never breaks a worker
            pass
        return data

    fetch._perf_timed = True  # type: ignore[attr-defined]
    return fetch


_ACTIVE: list[FetchClock] = []


def attach(loader: Any) -> FetchClock | None:
    """Time the fetches of ``loader``'s workers from its next iterator on; the clock :func:`active` returns.

    A loader without workers, or not a ``torch.utils.data.DataLoader`` (its own ``worker_init_fn``), gets none: the
    fetch is then not measured. A loader attached before keeps its clock.
    """
    from torch.utils.data import DataLoader

    _ACTIVE.clear()
    if not isinstance(loader, DataLoader) or not loader.num_workers:
        return None
    init = loader.worker_init_fn
    clock = init.clock if isinstance(init, TimedInit) else None
    if clock is None:
        clock = FetchClock(loader.num_workers)
        loader.worker_init_fn = TimedInit(clock, init)
    _ACTIVE.append(clock)
    return clock


def active() -> FetchClock | None:
    """The training loader's clock (the last :func:`attach`), None when its fetches are not timed."""
    return _ACTIVE[0] if _ACTIVE else None

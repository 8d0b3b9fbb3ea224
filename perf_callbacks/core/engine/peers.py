"""Between windows, the rank that holds the others back: each rank's interval figures, through the run's folder.

At each logging step every rank hands its interval's figures to its own background thread: the median step time, the
mean wait for the next batch a step (data loading), and the rest of the step (its median less that wait: forward,
backward, optimizer step). The thread writes the last :data:`ROUNDS` intervals' figures to
``<run>/.perf-callbacks-ranks/rank<R>.json`` (under a kilobyte, atomically). On rank 0 the thread then reads the
other ranks' files and judges them. Nothing is a collective and nothing waits: the training thread appends one
tuple (the thread looks every :data:`PUBLISH_S` seconds), and rank 0's warning, found by its thread, is said by the
training thread at its next logging step. A rank whose file is missing or stale (dead, slow, on another machine's
local disk) is left out.

The rule (:func:`judge`): over the last :data:`ROUNDS` logging steps that every rank published, a rank is slower in a
phase at one of them when its figure is above the median of the other ranks' by more than the largest of
:data:`MIN_EXCESS_MS`, :data:`MIN_RATIO` of that median, and :data:`NOISE_Z` times the ranks' own noise (the median
over ranks of 1.4826 x the MAD of their figure over those steps). Slower at :data:`SLOW_ROUNDS` of them: rank 0 warns
once, naming the rank and the phase. Data loading is judged first, and the rest of the step only when no rank is
slower in data loading: a rank's wait for the next batch is its own, while the rest of its step holds its wait for
the others at a collective (the victims of a rank slow in data loading show a longer rest). Under DDP the all-reduce
evens out the step times, so a rank slower in forward or backward shows no longer step between windows (the windows'
arrival order names it); a rank slower in data loading does, in its own wait for the next batch.

Example:
    >>> slow = {s: Figures(1, s, 10, 60.0, 50.0, 10.0) for s in (10, 20, 30, 40, 50)}
    >>> fine = {s: Figures(0, s, 10, 60.0, 0.2, 59.8) for s in (10, 20, 30, 40, 50)}
    >>> verdict = judge({0: fine, 1: slow})
    >>> verdict.rank, verdict.phase, verdict.slow
    (1, 'data_ms', 5)
"""

from __future__ import annotations

import collections
import json
import logging
import os
import statistics
import threading
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from perf_callbacks.core.triggers.request_files import read_small

log = logging.getLogger(__name__)
FOLDER = ".perf-callbacks-ranks"
ROUNDS = 5  # logging steps compared
SLOW_ROUNDS = 4  # ... of which a rank must be slower at this many
MIN_EXCESS_MS = 5.0  # ... by more than 5 ms a step
MIN_RATIO = 0.25  # ... and more than a quarter of the others' median
NOISE_Z = 4.0  # ... and more than 4 robust standard deviations of the ranks' own figures
KEEP = 20  # logging steps kept per rank on rank 0
PUBLISH_S = 0.5
"""How often the thread writes the intervals handed to it (and rank 0 judges): the training thread only appends."""
PHASES = {"data_ms": "data loading (the wait for the next batch)",
          "rest_ms": "the rest of the step (forward, backward and optimizer step, less the data wait)"}


@dataclass(frozen=True)
class Figures:
    """One rank's logging interval: ``step`` the logging step, ``steps`` measured, milliseconds a step."""

    rank: int
    step: int
    steps: int
    step_ms: float
    data_ms: float
    rest_ms: float


def figures(rank: int, step: int, step_times: Sequence[float], data_wait_s: float) -> Figures | None:
    """The figures of an interval's measured step times and data wait (seconds); None when none was measured."""
    if not step_times:
        return None
    median, data = statistics.median(step_times) * 1e3, data_wait_s / len(step_times) * 1e3
    return Figures(rank, step, len(step_times), round(median, 3), round(data, 3), round(max(median - data, 0.0), 3))


@dataclass(frozen=True)
class SlowRank:
    """A rank slower than the others in ``phase`` at ``slow`` of ``rounds`` logging steps (``steps``: first, last)."""

    rank: int
    phase: str
    slow: int
    rounds: int
    steps: tuple[int, int]
    rank_ms: float
    others_ms: float

    def message(self) -> str:
        """The warning's text: the rank, its phase, how often, by how much, and where to look."""
        return (f"rank {self.rank} is slower than the other ranks in {PHASES[self.phase]} at {self.slow} of the last "
                f"{self.rounds} logging steps (steps {self.steps[0]}-{self.steps[1]}): {self.rank_ms:.1f} ms a step "
                f"against {self.others_ms:.1f} ms on the others (median), beyond their spread; every rank waits for "
                f"it at the next collective. Look at rank {self.rank}'s host (other processes, its CPU count, its "
                f"disk or network for data) and profile a window on all ranks: perf-callbacks capture RUN_DIR")


def judge(history: dict[int, dict[int, Figures]]) -> SlowRank | None:
    """The rank persistently slower in one phase (see the module's docstring); None when there is none."""
    ranks = sorted(history)
    if len(ranks) < 2:
        return None
    common = sorted(set.intersection(*(set(history[r]) for r in ranks)))[-ROUNDS:]
    if len(common) < ROUNDS:
        return None
    found: tuple[float, SlowRank] | None = None
    for phase in PHASES:  # data first: a rank's data wait is its own, while the rest holds its wait for the others
        if found is not None:
            break
        table = {r: [float(getattr(history[r][s], phase)) for s in common] for r in ranks}
        noise = statistics.median(_mad(values) for values in table.values())
        for r in ranks:
            others = [statistics.median(table[q][i] for q in ranks if q != r) for i in range(len(common))]
            bars = [max(MIN_EXCESS_MS, MIN_RATIO * o, NOISE_Z * noise) for o in others]
            slow = sum(v - o > bar for v, o, bar in zip(table[r], others, bars, strict=True))
            excess = statistics.fmean(table[r]) - statistics.fmean(others)
            if slow >= SLOW_ROUNDS and (found is None or excess > found[0]):
                found = excess, SlowRank(r, phase, slow, len(common), (common[0], common[-1]),
                                         round(statistics.fmean(table[r]), 1), round(statistics.fmean(others), 1))
    return None if found is None else found[1]


class PeerBoard:
    """One rank's side: publish each interval's figures; on rank 0, judge the ranks (a daemon thread does the I/O).

    Args:
        run_dir: the run's local folder (the ranks that share it are compared).
        rank: this rank.
        world_size: the run's ranks (the files of ranks at or above it are ignored).
    """

    def __init__(self, run_dir: Path, rank: int, world_size: int) -> None:
        self.folder, self.rank, self.world_size = run_dir / FOLDER, rank, world_size
        self.history: dict[int, dict[int, Figures]] = {}
        self.verdict: SlowRank | None = None  # set by the thread, said once by the training thread
        self._handed: collections.deque[tuple[int, Sequence[float], float]] = collections.deque(maxlen=ROUNDS)
        self._latest: tuple[Figures, ...] = ()  # this rank's last ROUNDS intervals, all in its file (the thread's)
        self._said = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_run, args=(weakref.ref(self), self._stop),
                                        name="perf-callbacks-peers", daemon=True)
        self._thread.start()

    def interval(self, step: int, step_times: Sequence[float], data_wait_s: float) -> SlowRank | None:
        """A logging step (the training thread): hand the interval over; the verdict once it is there, once."""
        if step_times:  # the thread computes the figures: the interval's list is never changed after (a new one)
            self._handed.append((step, step_times, data_wait_s))
        if self.verdict is not None and not self._said:
            self._said = True
            return self.verdict
        return None

    def close(self) -> None:
        """Stop the thread (it ends at once; nothing waits for it)."""
        self._stop.set()

    def work(self) -> None:
        """The thread's round: write this rank's figures; on rank 0, read the others' and judge."""
        found = []
        while self._handed:  # appended by the training thread (an atomic append; popped here alone)
            got = figures(self.rank, *self._handed.popleft())
            if got is not None:
                found.append(got)
        if not found:
            return
        self._latest = latest = (*self._latest, *found)[-ROUNDS:]
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".rank{self.rank}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"rank": self.rank, "intervals": [asdict(f) for f in latest]}))
        os.replace(tmp, self.folder / f"rank{self.rank}.json")
        if self.rank != 0 or self.verdict is not None:
            return
        for r in range(self.world_size):
            kept = self.history.setdefault(r, {})
            for got in latest if r == self.rank else _read(self.folder / f"rank{r}.json", r):
                kept[got.step] = got
            for old in sorted(kept)[:-KEEP]:
                del kept[old]
        self.verdict = judge({r: kept for r, kept in self.history.items() if kept})


def _run(ref: weakref.ReferenceType[PeerBoard], stop: threading.Event) -> None:
    """Every :data:`PUBLISH_S` seconds: the board's round; it ends when closed or gone (held weakly)."""
    while not stop.wait(PUBLISH_S):
        board = ref()
        if board is None:
            return
        try:
            board.work()
        except Exception:  # noqa: BLE001 - a folder that fails: asked again at the next logging step
            log.debug("perf-callbacks: the ranks' interval figures could not be written or read", exc_info=True)
        del board


def _read(path: Path, rank: int) -> list[Figures]:
    """Rank ``rank``'s last intervals from its file; none when it is missing or not one."""
    try:
        data = json.loads(read_small(path) or b"null")
        found = [Figures(int(f["rank"]), int(f["step"]), int(f["steps"]), float(f["step_ms"]), float(f["data_ms"]),
                         float(f["rest_ms"])) for f in data["intervals"]]
    except (ValueError, TypeError, KeyError):
        return []
    return [f for f in found if f.rank == rank]


def _mad(values: list[float]) -> float:
    median = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - median) for v in values)

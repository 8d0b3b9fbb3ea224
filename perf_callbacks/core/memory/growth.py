"""Memory that grows step after step: the memory held at the start of logged steps, its trend, and the warning.

At each logging interval the engine reads, once, the memory held at the start of the next logged step (the same
point of every step it reads: after the previous step's optimizer step and the loop's ``zero_grad``): on CUDA
``torch.cuda.memory_allocated`` (no sync: the caching allocator's own count, so its cached blocks are no growth), on
CPU the host RSS. :class:`GrowthDetector` tells a leak from noise on those readings, as the slowdown detector does on
step times: the first readings are skipped (optimizer state created at the first step, lazy buffers), the rate is
the median of the per-step rises between readings (a profiling window or a one-off cache that lifts the memory once
is one rise, not a trend), and it fires once, when the memory rose at that rate in most intervals of the run for at
least ``min_intervals`` intervals, by more than it could be noise, and fast enough to fill the memory within
``horizon_steps`` steps. A growth so found is told only once it went on: as long again as it took to see it, and at
least ``CONFIRM_STEPS`` steps (less when the memory would be full sooner); a bounded cache that fills and then levels
off in between (its readings flat since) is no leak, and is never reported.

Example:
    >>> d = GrowthDetector(total_bytes=10 * 2**30)
    >>> readings = [(s, 2**30 + 2 * 2**20 * s) for s in range(4, 300, 4)]  # 2 MiB a step, read every 4 steps
    >>> found = [(step, d.check(step, held)) for step, held in readings]
    >>> [(step, g.rate / 2**20, g.since_step) for step, g in found if g is not None]  # seen at 44, told 200 on
    [(244, 2.0, 12)]
"""

from __future__ import annotations

import logging
import os
import resource
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from perf_callbacks.analysis.memory.growth import META_KEY
from perf_callbacks.core.memory.sampler import host_rss_bytes
from perf_callbacks.core.pid import current_pid

__all__ = ["META_KEY", "Growth", "GrowthDetector", "MemoryGrowth"]
log = logging.getLogger(__name__)
_MB = 1024.0 * 1024.0
_FRAGMENTS = (" or, on CPU, small tensors kept across steps (even detached) pin the C allocator's heap, whose freed "
              "blocks then grow the RSS (keep Python numbers: `loss.item()`)")
NOISE_SIGMAS = 3.0  # the median rise must be this many standard errors (of the rises' robust spread) above zero
CONFIRM_STEPS = 200  # a growth seen must go on at least this many steps more (a cache that fills, then levels off)


@dataclass(frozen=True)
class Growth:
    """A lasting growth: ``rate`` bytes a step since ``since_step``, ``held`` bytes at ``until_step``.

    ``steps_to_full`` is how many more steps at that rate fill the memory (None: the total is unknown).
    """

    rate: float
    since_step: int
    until_step: int
    held: int
    intervals: int
    steps_to_full: int | None


class GrowthDetector:
    """Tells memory that grows step after step from noise, on readings taken at the same point of logged steps.

    - The first ``warmup`` readings and readings before step ``min_step`` are skipped.
    - The rate is the median over the intervals since then of each interval's rise per step; it is computed after an
      interval in which the memory rose (a flat run costs one comparison a reading).
    - It fires once, when (confirmed as in the module's docstring) at least ``min_intervals`` intervals are in; the
      rate is positive and, in all but a quarter of the intervals, the memory rose by at least half the rate (a
      trend, not one jump); the rate is beyond the rises' noise (three standard errors of their robust spread:
      1.4826 x MAD), and the memory itself rose at half that rate at least (the medians of its first and last quarter
      of readings) and by six times its spread around the line of that rate; the rate times the steps covered is at
      least ``min_rise`` bytes and ``min_fraction`` of the memory held at the first reading; and at that rate the
      memory fills within ``horizon_steps`` steps (when ``total_bytes`` is known).
    - A rate that changed before it fired is told at its new rate (the median rise, on readings thinned to
      ``max_points``: 2 MB a step, then 0.4, is told at 0.4). After it fired it keeps the readings: :meth:`since`
      measures the growth after a step (a rate that changed since).

    Args:
        total_bytes: the memory that can be held (device or host), None when unknown.
        warmup: readings skipped at the start.
        min_intervals: intervals (between readings) before it can fire.
        min_rise: bytes the memory must have grown at the rate, at least.
        min_fraction: share of the first reading's memory it must have grown, at least.
        horizon_steps: the memory must fill within this many steps at the rate.
        min_step: readings before this step are skipped too.
    """

    def __init__(self, total_bytes: int | None, warmup: int = 2, min_intervals: int = 8, min_rise: float = 4 * _MB,
                 min_fraction: float = 0.01, horizon_steps: int = 1_000_000, min_step: int = 5,
                 max_points: int = 32, confirm_steps: int = CONFIRM_STEPS) -> None:
        self.total, self.warmup, self.min_intervals = total_bytes, warmup, min_intervals
        self.min_rise, self.min_fraction, self.horizon, self.min_step = min_rise, min_fraction, horizon_steps, min_step
        self.max_points = max_points
        self.points: list[tuple[int, int]] = []  # (step, held) after the warm-up
        self.rises: list[float] = []  # bytes per step from each point to the next
        self.seen = 0  # readings fed, the warm-up included
        self.seen_growth: Growth | None = None  # a growth found, not yet confirmed (see _confirm_steps)
        self.confirm_steps = confirm_steps
        self.fired = False

    def check(self, step: int, held: int) -> Growth | None:
        """Feed the memory ``held`` at the start of ``step``; returns the growth once it lasts (once)."""
        self.seen += 1
        if self.seen <= self.warmup or step < self.min_step:
            return None
        pts = self.points
        if pts and step <= pts[-1][0]:
            return None
        if pts:
            self.rises.append((held - pts[-1][1]) / (step - pts[-1][0]))
        pts.append((step, held))
        if len(pts) > self.max_points:  # every other one: the rate and the trend hold on fewer points
            kept = pts[::2]
            self.points = pts = kept if kept[-1] == pts[-1] else [*kept, pts[-1]]
            self.rises = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(pts, pts[1:], strict=False)]
        if self.fired:
            return None
        seen = self.seen_growth  # a growth counts once it went on (see _confirm_steps)
        if seen is not None and step >= seen.until_step + _confirm_steps(seen, self.confirm_steps):
            self.seen_growth = None
            if held - seen.held < 0.5 * seen.rate * (step - seen.until_step):  # it levelled off: a cache that filled
                return None
            growth = self._find(pts, step, held)
            self.fired = growth is not None
            return growth
        if seen is not None or len(pts) <= self.min_intervals or self.rises[-1] <= 0:  # no rise: nothing new
            return None
        self.seen_growth = self._find(pts, step, held)
        return None

    def _find(self, pts: list[tuple[int, int]], step: int, held: int) -> Growth | None:
        """The growth of the readings since the warm-up, else of the recent ones; None when neither grows."""
        for first in dict.fromkeys((0, max(0, len(pts) - 2 * self.min_intervals - 1))):
            growth = self._growth(pts[first:], self.rises[first:], step, held)
            if growth is not None:
                return growth
        return None

    def since(self, after: int, step: int, held: int) -> Growth | None:
        """The growth of the readings from step ``after`` on (at least ``min_intervals`` intervals), or None."""
        first = next((i for i, (s, _) in enumerate(self.points) if s >= after), len(self.points))
        if len(self.points) - first <= self.min_intervals:
            return None
        return self._growth(self.points[first:], self.rises[first:], step, held)

    def _growth(self, pts: list[tuple[int, int]], rises: list[float], step: int, held: int) -> Growth | None:
        rate = statistics.median(rises)
        if rate <= 0 or sum(r < rate / 2 for r in rises) > len(rises) // 4:
            return None
        spread = 1.4826 * statistics.median(abs(r - rate) for r in rises)  # the rises' own noise (robust)
        if rate <= NOISE_SIGMAS * spread / len(rises) ** 0.5 or not _levels_rose(pts, rate):
            return None
        span = pts[-1][0] - pts[0][0]
        if rate * span < max(self.min_rise, self.min_fraction * pts[0][1]):
            return None
        to_full = None if self.total is None else max(0, int((self.total - held) / rate))
        if to_full is not None and to_full > self.horizon:
            return None
        return Growth(rate, pts[0][0], step, held, len(rises), to_full)


class MemoryGrowth:
    """The engine's part: reads the held memory at logged steps' start, logs it, and warns once on a growth.

    Args:
        device: the CUDA device of this rank, or None for host memory (RSS).
        warn: ``warn(message)``, the engine's warn-once (rank 0).
        profile_memory: windows record allocations (``profile_memory``), so the next one names the op that keeps
            memory; else the warning says how to get it.

    ``follow(step)``, set by the engine, arranges the window that names the operator when the growth is told, and
    says which (``EngineCaptures.growth_window``); None: the warning says what ``profile_memory`` allows.
    """

    def __init__(self, device: torch.device | None, warn: Callable[[str], None], profile_memory: bool = False) -> None:
        self.device = device if device is not None and device.type == "cuda" else None
        self._warn, self.profile_memory = warn, profile_memory
        self.detector = GrowthDetector(_total_bytes(self.device))
        self.held: tuple[int, int] | None = None  # (step, bytes) of the last reading, logged at the logging step
        self.growth: Growth | None = None
        self.follow: Callable[[int], str] | None = None

    def read(self, step: int) -> None:
        """The memory held now, at the start of ``step``: a logging step's reading (no device sync)."""
        held = _allocated(self.device) if self.device is not None else host_rss_bytes()
        self.held = (step, held)
        found = self.detector.check(step, held)
        if found is not None:
            self.growth = found
            self._warn(self.message(found, self.follow(step) if self.follow is not None else None))
        elif (g := self.growth) is not None and step - g.until_step >= self.detector.confirm_steps \
                and held - g.held < 0.5 * g.rate * (step - g.until_step):  # it slowed down, or levelled off, since
            self.growth = now = self.detector.since(g.until_step, step, held)  # what windows after this one look for
            if now is None:
                log.info("perf-callbacks: the memory held levelled off by step %d (%.2f GB)", step, held / 1e9)
            else:
                log.info("perf-callbacks: the memory growth slowed to %.2f MB per step (steps %d-%d; it was %.2f)",
                         now.rate / 1e6, now.since_step, step, g.rate / 1e6)

    def add_metrics(self, metrics: dict[str, float]) -> None:
        """``memory/held_mb`` (the last step-start reading) and, on CPU, ``memory/peak_rss_mb`` for the interval."""
        if self.held is not None:
            metrics["memory/held_mb"] = self.held[1] / _MB
        if self.device is None and (peak := _interval_peak_rss()) is not None:
            metrics["memory/peak_rss_mb"] = peak / _MB

    def meta(self) -> dict[str, float | int] | None:
        """The measured growth, for the next window's trace (None before it is measured)."""
        g = self.growth
        return None if g is None else {"bytes_per_step": g.rate, "since_step": g.since_step, "until_step": g.until_step}

    def message(self, g: Growth, follow: str | None = None) -> str:
        """The warning's text: the rate, since when, the steps left at that rate, and ``follow``: what names the op."""
        what = "allocated device memory" if self.device is not None else "host memory (RSS)"
        left = "" if g.steps_to_full is None else (
            f"; at this rate the {'device' if self.device is not None else 'host RAM'} is full in about "
            f"{g.steps_to_full:,} steps")
        return (f"{what} at the start of a step grows by {g.rate / 1e6:.2f} MB per step: from step {g.since_step} to "
                f"step {g.until_step} it rose in most of {g.intervals} logging intervals, to {g.held / 1e9:.2f} GB"
                f"{left}. Something keeps tensors across steps (a loss or an output appended to a list? keep "
                "`loss.item()`; `.detach()` frees only a graph kept with it)"
                f"{'' if self.device is not None else _FRAGMENTS}; "
                + (follow if follow is not None else "the next profiling window names the operator that allocates what "
                   "is kept" if self.profile_memory else "set profile_memory=True and the next profiling window names "
                   "the operator that allocates what is kept"))


def _confirm_steps(g: Growth, least: int) -> int:
    """How long a growth seen must go on before it is told.

    As long again as it took to see it, ``least`` steps at least, but no more than a quarter of the steps left before
    the memory is full at its rate.
    """
    wait = max(g.until_step - g.since_step, least)
    return wait if g.steps_to_full is None else min(wait, g.steps_to_full // 4)


def _levels_rose(pts: list[tuple[int, int]], rate: float) -> bool:
    """Whether the memory itself rose at half the rate at least, and beyond its own spread.

    From the median of its first quarter of readings to that of its last, by more than ``2 * NOISE_SIGMAS`` times
    its robust spread around the line of that rate. Rises of noise have a positive median now and then while the
    memory stays where it was.
    """
    q = max(1, len(pts) // 4)
    first, last = pts[:q], pts[-q:]
    steps = statistics.median(s for s, _ in last) - statistics.median(s for s, _ in first)
    rose = statistics.median(h for _, h in last) - statistics.median(h for _, h in first)
    residuals = [h - rate * s for s, h in pts]
    at = statistics.median(residuals)
    noise = 1.4826 * statistics.median(abs(r - at) for r in residuals)
    return rose >= 0.5 * rate * steps and rose > 2 * NOISE_SIGMAS * noise


def _allocated(device: torch.device) -> int:
    """The caching allocator's allocated bytes (one nested-dict read, as ``MemorySampler``: no flattening, no sync)."""
    stats = torch.cuda.memory_stats_as_nested_dict(device)
    return int(stats.get("allocated_bytes", {}).get("all", {}).get("current", 0))


def _total_bytes(device: torch.device | None) -> int | None:
    """The device's memory, or the host's available RAM now plus this process's RSS (None when unknown)."""
    try:
        if device is not None:
            return int(torch.cuda.get_device_properties(device).total_memory)
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 + host_rss_bytes()
    except (OSError, ValueError, IndexError, RuntimeError, AssertionError):
        return None
    return None


_clear_refs: list[int] = []  # (pid, fd) of this process's /proc/<pid>/clear_refs, kept open


def _interval_peak_rss() -> int | None:
    """The process's peak RSS since the last call, then reset; None where Linux cannot reset it.

    ``getrusage``'s ``ru_maxrss`` is the high-water mark of the process's memory map (after ``exec``), which writing
    ``5`` to ``/proc/<pid>/clear_refs`` resets (Linux 4.0+): two system calls, no ``/proc/self/status`` to format
    (and no ``getpid``: :func:`~perf_callbacks.core.pid.current_pid`).
    """
    pid = current_pid()
    try:
        if not _clear_refs or _clear_refs[0] != pid:  # a forked child opens its own
            _clear_refs[:] = [pid, os.open(f"/proc/{pid}/clear_refs", os.O_WRONLY)]
        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
        os.write(_clear_refs[1], b"5")
    except OSError:
        return None
    return peak

"""The device timeline of one rank: every moment of the window labelled with what the device did, or why it idled.

Busy time is the union of kernel, memcpy and memset intervals (never a sum of durations). Idle time is split by cause:
``input`` while a DataLoader ``__next__`` or ``perf_callbacks.data_wait`` range runs, ``communication`` while a
gloo/nccl collective runs on the host, ``sync`` when the gap begins as a blocking call returns, ``host`` when the next
operation was launched only after the device had gone idle, and ``other`` when it had been launched in time.
On CPU-only traces the main thread is labelled instead: ``compute`` inside traced CPU ops, ``other`` outside them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field

from perf_callbacks.analysis.events import RankTrace
from perf_callbacks.analysis.intervals import Span, gaps, intersect, subtract, total, union

CAUSES = ("compute", "copy", "communication", "input", "sync", "host", "other")
SYNC_WINDOW_US = 300.0
SLACK_US = 5.0

Segment = tuple[float, float, str]


@dataclass
class Timeline:
    """Labelled segments covering ``[lo, hi]`` plus the evidence behind the idle causes.

    Args:
        lo: window start (first ProfilerStep start), microseconds.
        hi: window end (the later of the last step end and the last device op end).
        segments: ``(start, end, cause)`` sorted by start; causes come from ``CAUSES``.
        sync_calls: blocking call name -> idle microseconds of the gaps it began.
        device: the device id the timeline describes (None for a CPU-only trace).
        busy_us: length of the union of the device's kernel, memcpy and memset intervals inside the window.
    """

    lo: float
    hi: float
    segments: list[Segment] = field(default_factory=list)
    sync_calls: dict[str, float] = field(default_factory=dict)
    device: int | None = None
    busy_us: float = 0.0

    def totals(self, lo: float | None = None, hi: float | None = None) -> dict[str, float]:
        """Microseconds per cause inside ``[lo, hi]`` (the whole window by default)."""
        lo = self.lo if lo is None else lo
        hi = self.hi if hi is None else hi
        out = dict.fromkeys(CAUSES, 0.0)
        for a, b, cause in self.segments:
            if b > lo and a < hi:
                out[cause] += min(b, hi) - max(a, lo)
        return out


def window_bounds(trace: RankTrace) -> Span | None:
    """``(lo, hi)`` as the fixtures' busy.py defines it, or the extent of all ops when there is no ProfilerStep."""
    gpu_end = max((g[1] for g in trace.gpu), default=None)
    if trace.steps:
        lo, hi = trace.steps[0][1], max(s[2] for s in trace.steps)
    elif trace.cpu_ops or trace.gpu:
        spans = [(o[0], o[1]) for o in trace.cpu_ops] + [(g[0], g[1]) for g in trace.gpu]
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
    else:
        return None
    return lo, max(hi, gpu_end) if gpu_end is not None else hi


def primary_device(trace: RankTrace) -> int | None:
    """Return the device with the most ops (a rank normally drives one), or None without device activity."""
    counts = Counter(g[4] for g in trace.gpu)
    return counts.most_common(1)[0][0] if counts else None


def build_timeline(trace: RankTrace) -> Timeline | None:
    """Labels every moment of the rank's window; None when the trace holds no op at all."""
    bounds = window_bounds(trace)
    if bounds is None:
        return None
    lo, hi = bounds
    data = union(trace.data_spans)
    comm = union((a, b) for a, b, _ in trace.comm_spans)
    device = primary_device(trace)
    tl = Timeline(lo, hi, device=device)
    if device is None:
        tl.segments = _label(intersect([(lo, hi)], data), "input") + _label(
            subtract(intersect([(lo, hi)], comm), data), "communication"
        )
        rest = subtract(subtract([(lo, hi)], data), comm)
        main = trace.steps[0][3] if trace.steps else None
        traced = union((o[0], o[1]) for o in trace.cpu_ops if main is None or o[2] == main)
        tl.segments += _label(intersect(rest, traced), "compute") + _label(subtract(rest, traced), "other")
    else:
        busy, tl.segments = _busy_segments(trace, device, lo, hi)
        tl.busy_us = total(busy)
        idle = gaps(busy, lo, hi)
        tl.segments += _label(intersect(idle, data), "input")
        idle = subtract(idle, data)
        tl.segments += _label(intersect(idle, comm), "communication")
        tl.segments += _classify_gaps(trace, device, subtract(idle, comm), tl.sync_calls)
    tl.segments.sort()
    return tl


def _label(spans: list[Span], cause: str) -> list[Segment]:
    return [(a, b, cause) for a, b in spans]


def _busy_segments(trace: RankTrace, device: int, lo: float, hi: float) -> tuple[list[Span], list[Segment]]:
    ops = [g for g in trace.gpu if g[4] == device and g[1] > lo and g[0] < hi]
    kernels = union((max(g[0], lo), min(g[1], hi)) for g in ops if g[2] == "kernel" and "nccl" not in g[3].lower())
    comm = union((max(g[0], lo), min(g[1], hi)) for g in ops if g[2] == "kernel" and "nccl" in g[3].lower())
    copies = union((max(g[0], lo), min(g[1], hi)) for g in ops if g[2] != "kernel")
    comm_exposed = subtract(comm, kernels)
    copy_exposed = subtract(subtract(copies, kernels), comm)
    segments = _label(kernels, "compute") + _label(comm_exposed, "communication") + _label(copy_exposed, "copy")
    return union(kernels + comm + copies), segments


def _classify_gaps(trace: RankTrace, device: int, pieces: list[Span], sync_calls: dict[str, float]) -> list[Segment]:
    ops = [g for g in trace.gpu if g[4] == device]
    starts = [g[0] for g in ops]
    sync_ends = [s[1] for s in trace.syncs]
    out = []
    for p0, p1 in pieces:
        blocker = _blocking_call(trace.syncs, sync_ends, p0, p1)
        if blocker is not None:
            sync_calls[blocker] = sync_calls.get(blocker, 0.0) + p1 - p0
            out.append((p0, p1, "sync"))
            continue
        i = bisect_left(starts, p1 - SLACK_US)
        launched = trace.launches.get(ops[i][5]) if i < len(ops) else None
        late = launched is None or launched[0] >= p0 - SLACK_US
        out.append((p0, p1, "host" if late else "other"))
    return out


def _blocking_call(syncs: list[tuple[float, float, str]], ends: list[float], p0: float, p1: float) -> str | None:
    """Return the outermost blocking call that waited as the device went idle at ``p0`` and returned soon after."""
    first = bisect_left(ends, p0 - SLACK_US)
    last = bisect_right(ends, min(p1, p0 + SYNC_WINDOW_US))
    waiting = [s for s in syncs[first:last] if s[0] <= p0 + SLACK_US]
    return min(waiting)[2] if waiting else None

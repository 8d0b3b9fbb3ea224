"""The device timeline of one rank: every moment of the window labelled with what the device did, or why it idled.

Busy time is the union of kernel, memcpy and memset intervals (never a sum of durations). Idle time is split by cause:
``input`` while the training loader's ``next()`` runs (``RankTrace.data_spans``), ``communication`` while a
gloo/nccl collective runs on the host, ``sync`` when the gap begins as a blocking call returns, ``host`` when the next
operation was launched only after the device had gone idle, and ``other`` when it had been launched in time.
The gap at the window's start is ``backlog`` from the first op's launch to its start when it started long after
its launch (more than ``BACKLOG_US``): the device was still running work queued before, which is not host idle. Before
that launch the device had nothing to run: ``host`` (a trace whose first launch comes 20 s into the window, after
CUDA initialisation, has 20 s of host time there, not backlog). While a blocking call (a synchronous
``hipMemcpyWithStream``, say) holds the host for the whole of that gap (all but ``1 - HELD_SHARE`` of it), nothing
was queued and running: the stream waited on an event, and the gap is ``sync``, not backlog. The kernels of a
CUDA graph replay take the launch time of their ``cudaGraphLaunch``; idle between two kernels of one replay is
``other``, and counted in ``graph_idle_us``.
On CPU-only traces the main thread is labelled instead: ``compute`` inside traced CPU ops, ``other`` outside them.
Time inside our validation and checkpoint spans is set aside (see :mod:`perf_callbacks.analysis.trace.aside`): no
segment covers it, the device's busy time there is not counted, and ``measured_us`` (the denominator of every fraction)
leaves it out.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field

from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.intervals import Span, clip, gaps, intersect, subtract, total, union
from perf_callbacks.analysis.trace.schema import (
    COPY_KINDS,
    DEVICE_EVENT,
    GPU_DEVICE,
    GPU_KIND,
    GPU_NAME,
    OP_THREAD,
    STEP_END,
    STEP_START,
    STEP_THREAD,
    SYNC_CALLS,
    GpuRow,
    copy_kind,
)

CAUSES = ("compute", "copy", "communication", "input", "sync", "host", "other", "backlog")
SYNC_WINDOW_US = 300.0
SLACK_US = 5.0
BACKLOG_US = 100.0
HELD_SHARE = 0.99
"""A blocking call holds a gap when it covers this share of it (or all but ``SLACK_US`` at each end): a host that
enters ``hipMemcpyWithStream`` 0.24 ms into a 463 ms gap held it."""
WINDOW_DEFINITION = "first ProfilerStep start to the later of the last step end and the last device op end"
WINDOW_NO_STEPS = "first to last device op (the trace has no ProfilerStep)"
WINDOW_HOST_ONLY = "first to last traced op (the trace has no ProfilerStep)"

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
        busy_us: length of the union of the device's kernel, memcpy and memset intervals inside the window, outside
            ``aside``.
        aside: the merged validation and checkpoint spans inside the window, set aside (no segment covers them).
        definition: how the window was chosen (``WINDOW_DEFINITION``, ``WINDOW_NO_STEPS`` or ``WINDOW_HOST_ONLY``).
        prologue_us: traced host time before the window of a trace without ProfilerStep that has device activity (its
            window is the span the device was in use, as HTA measures it): start-up such as CUDA initialisation.
        epilogue_us: likewise, traced host time after the last device op.
    """

    lo: float
    hi: float
    segments: list[Segment] = field(default_factory=list)
    sync_calls: dict[str, float] = field(default_factory=dict)
    device: int | None = None
    busy_us: float = 0.0
    graph_idle_us: float = 0.0
    copy_exposed_us: dict[str, float] = field(default_factory=dict)
    aside: list[Span] = field(default_factory=list)
    definition: str = WINDOW_DEFINITION
    prologue_us: float = 0.0
    epilogue_us: float = 0.0

    @property
    def measured_us(self) -> float:
        """The window's length less the time set aside: what every fraction of the window is a fraction of."""
        return self.hi - self.lo - total(self.aside)

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
    """``(lo, hi)`` of the window (see ``window``)."""
    found = window(trace)
    return None if found is None else (found[0], found[1])


def window(trace: RankTrace) -> tuple[float, float, str, float, float] | None:
    """``(lo, hi, definition, prologue_us, epilogue_us)``; None for a trace without any op.

    With ProfilerStep: the first step start to the later of the last step end and the last device op end (the fixtures'
    busy.py). Without: the span the device was in use, first to last device op (HTA's window), and the traced host
    time before and after it is the prologue and epilogue; on a trace without device activity, every traced op.
    """
    gpu_lo = min((g[0] for g in trace.gpu), default=None)
    gpu_hi = max((g[1] for g in trace.gpu), default=None)
    if trace.steps:
        lo, hi = trace.steps[0][STEP_START], max(s[STEP_END] for s in trace.steps)
        return lo, hi if gpu_hi is None else max(hi, gpu_hi), WINDOW_DEFINITION, 0.0, 0.0
    ops = [(o[0], o[1]) for o in trace.cpu_ops]
    if gpu_lo is not None and gpu_hi is not None and gpu_hi > gpu_lo:
        host = ops + [(ts, ts) for ts, _ in trace.launches.values()]
        before = gpu_lo - min((a for a, _ in host), default=gpu_lo)
        after = max((b for _, b in host), default=gpu_hi) - gpu_hi
        return gpu_lo, gpu_hi, WINDOW_NO_STEPS, max(before, 0.0), max(after, 0.0)
    spans = ops + [(g[0], g[1]) for g in trace.gpu]
    if not spans:
        return None
    return min(a for a, _ in spans), max(b for _, b in spans), WINDOW_HOST_ONLY, 0.0, 0.0


def devices(trace: RankTrace) -> list[int]:
    """Return the devices with activity, the one with the most ops first (a rank normally drives one)."""
    return [d for d, _ in Counter(g[GPU_DEVICE] for g in trace.gpu).most_common()]


def primary_device(trace: RankTrace) -> int | None:
    """Return the device with the most ops, or None without device activity."""
    found = devices(trace)
    return found[0] if found else None


def build_timeline(trace: RankTrace, device: int | None = None) -> Timeline | None:
    """Labels every moment of the rank's window on ``device`` (the primary one by default); None without any op."""
    bounds = window(trace)
    if bounds is None:
        return None
    lo, hi, definition, before, after = bounds
    data = union(trace.data_spans)
    comm = union((a, b) for a, b, _ in trace.comm_spans)
    device = primary_device(trace) if device is None else device
    tl = Timeline(lo, hi, device=device, aside=clip(union((a, b) for a, b, _ in trace.aside_spans), lo, hi),
                  definition=definition, prologue_us=before, epilogue_us=after)
    keep = subtract([(lo, hi)], tl.aside)
    if device is None:
        tl.segments = _label(intersect(keep, data), "input") + _label(
            subtract(intersect(keep, comm), data), "communication"
        )
        rest = subtract(subtract(keep, data), comm)
        main = trace.steps[0][STEP_THREAD] if trace.steps else None
        traced = union((o[0], o[1]) for o in trace.cpu_ops if main is None or o[OP_THREAD] == main)
        tl.segments += _label(intersect(rest, traced), "compute") + _label(subtract(rest, traced), "other")
    else:
        busy, segments = _busy_segments(trace, device, tl)
        tl.busy_us = total(busy) - total(intersect(busy, tl.aside))
        idle = gaps(busy, lo, hi)
        segments += _label(intersect(idle, data), "input")
        idle = subtract(idle, data)
        segments += _label(intersect(idle, comm), "communication")
        segments += _classify_gaps(trace, device, subtract(idle, comm), tl)
        tl.segments = _trim(segments, keep) if tl.aside else segments
    tl.segments.sort()
    return tl


def _trim(segments: list[Segment], keep: list[Span]) -> list[Segment]:
    """The parts of labelled segments inside ``keep`` (the window less the time set aside)."""
    return [(a, b, cause) for s0, s1, cause in segments for a, b in clip(keep, s0, s1)]


def _kept(tl: Timeline, a: float, b: float) -> float:
    """Length of ``[a, b]`` outside the time set aside."""
    return b - a - total(clip(tl.aside, a, b)) if tl.aside else b - a


def _label(spans: list[Span], cause: str) -> list[Segment]:
    return [(a, b, cause) for a, b in spans]


def _busy_segments(trace: RankTrace, device: int, tl: Timeline) -> tuple[list[Span], list[Segment]]:
    lo, hi = tl.lo, tl.hi
    ops = [g for g in trace.gpu if g[GPU_DEVICE] == device and g[1] > lo and g[0] < hi]
    kernels = union((max(g[0], lo), min(g[1], hi)) for g in ops
                    if g[GPU_KIND] == "kernel" and "nccl" not in g[GPU_NAME].lower())
    comm = union((max(g[0], lo), min(g[1], hi)) for g in ops
                 if g[GPU_KIND] == "kernel" and "nccl" in g[GPU_NAME].lower())
    copies = union((max(g[0], lo), min(g[1], hi)) for g in ops if g[GPU_KIND] in COPY_KINDS)
    waits = union((max(g[0], lo), min(g[1], hi)) for g in ops if g[GPU_KIND] == DEVICE_EVENT)
    comm_exposed = subtract(comm, kernels)
    copy_exposed = subtract(subtract(copies, kernels), comm)
    wait_exposed = subtract(subtract(waits, kernels), union(comm + copies))
    for kind, spans in copy_spans(ops).items():
        exposed = total(subtract(intersect(copy_exposed, clip(spans, lo, hi)), tl.aside))
        if exposed > 0:
            tl.copy_exposed_us[kind] = exposed
    segments = _label(kernels, "compute") + _label(comm_exposed, "communication") + _label(copy_exposed, "copy")
    segments += _label(wait_exposed, "sync")  # the device's queue waited on an event: busy as HTA counts it
    return union(kernels + comm + copies + waits), segments


def copy_spans(ops: list[GpuRow]) -> dict[str, list[Span]]:
    """The merged intervals of each copy kind among ``ops``."""
    by_kind: dict[str, list[Span]] = {}
    for g in ops:
        if g[GPU_KIND] in COPY_KINDS:
            by_kind.setdefault(copy_kind(g[GPU_KIND], g[GPU_NAME]), []).append((g[0], g[1]))
    return {k: union(v) for k, v in by_kind.items()}


def _classify_gaps(trace: RankTrace, device: int, pieces: list[Span], tl: Timeline) -> list[Segment]:
    ops = [g for g in trace.gpu if g[GPU_DEVICE] == device]
    starts = [g[0] for g in ops]
    sync_ends = [s[1] for s in trace.syncs]
    out = []
    for p0, p1 in pieces:
        blocker = _blocking_call(trace.syncs, sync_ends, p0, p1)
        if blocker is not None:
            tl.sync_calls[blocker] = tl.sync_calls.get(blocker, 0.0) + _kept(tl, p0, p1)
            out.append((p0, p1, "sync"))
            continue
        i = bisect_left(starts, p1 - SLACK_US)
        cause = _gap_cause(trace, ops, i, p0, tl)
        launched = trace.launches.get(ops[i][5]) if cause == "backlog" else None
        if launched is not None and p0 + SLACK_US < launched[0] < p1:  # backlog starts at the delayed work's launch
            out.append((p0, launched[0], "host"))
            p0 = launched[0]
        if cause == "graph":
            tl.graph_idle_us += _kept(tl, p0, p1)
            cause = "other"
        held = _holding_call(trace.syncs, p0, p1) if cause == "backlog" else None
        if held is not None:  # the host sat in a blocking call all along: nothing was queued and running
            tl.sync_calls[held] = tl.sync_calls.get(held, 0.0) + _kept(tl, p0, p1)
            cause = "sync"
        out.append((p0, p1, cause))
    return out


def _holding_call(syncs: list[tuple[float, float, str]], p0: float, p1: float) -> str | None:
    """The blocking call that held the host from ``p0`` to ``p1`` (within ``SLACK_US``, or ``HELD_SHARE`` of it)."""
    held = [s for s in syncs if (s[0] <= p0 + SLACK_US and s[1] >= p1 - SLACK_US)
            or min(s[1], p1) - max(s[0], p0) >= HELD_SHARE * (p1 - p0)]
    return min(held)[2] if held else None


def _gap_cause(trace: RankTrace, ops: list[GpuRow], i: int, p0: float, tl: Timeline) -> str:
    """Why the device idled from ``p0`` until ``ops[i]`` started: host, backlog, graph (inside a replay) or other."""
    host = "host" if trace.runtime_calls else "other"  # no runtime call traced: no evidence that the host was late
    if i >= len(ops):
        return host  # nothing more was launched before the window ended
    nxt = ops[i]
    corr = nxt[5]
    graph_end = trace.graph_launches.get(corr)
    launched = trace.launches.get(corr)
    if launched is None:
        return "backlog" if p0 <= tl.lo + SLACK_US else host
    if graph_end is not None and i > 0 and ops[i - 1][5] == corr:
        return "graph"
    if p0 <= tl.lo + SLACK_US and nxt[0] - launched[0] > BACKLOG_US:
        return "backlog"
    ready = graph_end if graph_end is not None else launched[0]
    return "host" if ready >= p0 - SLACK_US else "other"


def _blocking_call(syncs: list[tuple[float, float, str]], ends: list[float], p0: float, p1: float) -> str | None:
    """Return the outermost blocking call that waited as the device went idle at ``p0`` and returned soon after."""
    first = bisect_left(ends, p0 - SLACK_US)
    last = bisect_right(ends, min(p1, p0 + SYNC_WINDOW_US))
    waiting = [s for s in syncs[first:last] if s[0] <= p0 + SLACK_US and s[2] in SYNC_CALLS]
    return min(waiting)[2] if waiting else None

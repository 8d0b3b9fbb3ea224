"""One rank's arrival at each collective, and its own time in each phase: the input of the culprit judgement.

Each collective becomes one row ``[group, name, seq, step, start, end]``, in wall-clock microseconds (the trace's
``ts`` plus its ``baseTimeNanoseconds``, the clock that ranks on different hosts share up to their NTP error):

- NCCL kernels on the timeline's device: ``start`` is the CPU-side enqueue (the ``record_param_comms`` op that
  launched the kernel, else the launch call, else the kernel's start), ``end`` the kernel's end; ``group`` and ``seq``
  come from the op's ``Process Group Name`` and ``Seq`` (-1 when the trace has none);
- without NCCL kernels, ``gloo:`` host spans (they run on gloo's worker thread): ``start`` is the ``c10d::`` op that
  enqueued it on the training thread when both are counted alike, else the span's start; ``end`` the span's end.

``phases`` holds, per phase (``data_wait`` from the training loader's fetches; ``forward``, ``backward``,
``optimizer_step``... from our ``perf_callbacks.*`` spans), the median per step of the phase's time outside any
collective: under DDP a rank that waits for a late one waits inside backward, and that wait is not its own work.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from statistics import median
from typing import Any

from perf_callbacks.analysis.trace.aside import within
from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.extra_events import NCCL_ARGS, NCCL_CORRELATION, NCCL_DEVICE, NCCL_EXTERNAL_ID
from perf_callbacks.analysis.trace.intervals import Span, clip, intersect, total, union
from perf_callbacks.analysis.trace.schema import STEP_NUMBER, STEP_START, collective_name, nccl_collective
from perf_callbacks.analysis.trace.timeline import Timeline

Arrival = list[Any]
"""``[group, name, seq, step, start_us, end_us]``; ``seq`` -1 when the trace has no collective sequence number."""
NOT_PHASES = ("validation", "checkpoint", "overhead", "step")
"""Our spans that are no phase of a training step."""


def arrivals(trace: RankTrace, tl: Timeline) -> dict[str, Any]:
    """``{host, calls, phases}`` of one rank (``calls`` empty without collectives); see the module docstring."""
    calls = _device_calls(trace, tl) or _host_calls(trace, tl)
    steps = [s[STEP_START] for s in trace.steps]
    for row in calls:
        i = bisect_right(steps, row[4]) - 1
        row[3] = trace.steps[i][STEP_NUMBER] if i >= 0 else -1
    calls.sort(key=lambda row: row[4])
    host = trace.meta.get("host_name")
    phases = phase_ms(trace, tl, union((row[4], row[5]) for row in calls))
    base = base_us(trace.meta)
    for row in calls:
        row[4], row[5] = row[4] + base, row[5] + base
    return {"host": host if isinstance(host, str) else "", "calls": calls, "phases": phases}


def base_us(meta: dict[str, Any]) -> float:
    """The trace's ``baseTimeNanoseconds`` in microseconds (what turns its ``ts`` into wall-clock time), else 0."""
    base = meta.get("baseTimeNanoseconds")
    return base / 1e3 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0


def phase_ms(trace: RankTrace, tl: Timeline, comms: list[Span]) -> dict[str, float]:
    """Per phase, the median per step of its time outside ``comms`` (milliseconds); empty without steps."""
    spans: dict[str, list[Span]] = defaultdict(list)
    spans["data_wait"] = list(trace.data_spans)
    for a, b, name in trace.phase_spans:
        if name not in NOT_PHASES and not name.startswith("module"):
            spans[name].append((a, b))
    bounds = [s[STEP_START] for s in trace.steps] + [tl.hi]
    out = {}
    for name, found in spans.items():
        merged = union(found)
        if not merged or len(bounds) < 2:
            continue
        per_step = []
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            own = clip(merged, lo, hi)
            per_step.append((total(own) - total(intersect(own, comms))) / 1e3)
        out[name] = median(per_step)
    return out


def _group_of(trace: RankTrace) -> str:
    info = trace.meta.get("distributedInfo")
    groups = info.get("pg_config") if isinstance(info, dict) else None
    if isinstance(groups, list) and len(groups) == 1 and isinstance(groups[0], dict):
        return str(groups[0].get("pg_name", ""))
    return ""


def _device_calls(trace: RankTrace, tl: Timeline) -> list[Arrival]:
    out = []
    for k in trace.extra.nccl:
        if k[NCCL_DEVICE] != tl.device:
            continue
        corr, ext = k[NCCL_CORRELATION], k[NCCL_EXTERNAL_ID]
        launch = trace.launches.get(corr) if isinstance(corr, int) else None
        if ext in (-1, None) and launch is not None:
            ext = launch[1]
        args = k[NCCL_ARGS] or (trace.extra.param_comms.get(ext) if isinstance(ext, (int, str)) else None) or {}
        op = trace.ext_spans.get(ext) if isinstance(ext, (int, str)) else None
        start = op[0] if op is not None else launch[0] if launch is not None else k[0]
        if within(tl.aside, start) or not tl.lo <= k[0] < tl.hi:
            continue
        name = collective_name(str(args["Collective name"])) if args.get("Collective name") else \
            nccl_collective(k[3]) or "other"
        group = args.get("Process Group Name", _group_of(trace))
        seq = args.get("Seq")
        out.append([str(group), name, seq if isinstance(seq, int) and not isinstance(seq, bool) else -1, -1,
                    min(start, k[0]), k[1]])
    return out


def _host_calls(trace: RankTrace, tl: Timeline) -> list[Arrival]:
    group = _group_of(trace)
    spans = [(a, b, collective_name(n.split(":", 1)[1])) for a, b, n in trace.comm_spans if n.startswith("gloo:")]
    spans = [s for s in spans if tl.lo <= s[0] < tl.hi and not within(tl.aside, s[0])]
    enqueued: dict[str, list[float]] = defaultdict(list)
    for a, b, _tid, name in trace.cpu_ops:
        if name.startswith("c10d::") and tl.lo <= b and a < tl.hi and not within(tl.aside, a):
            enqueued[collective_name(name[6:].rstrip("_"))].append(a)
    by_name: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for s in spans:
        by_name[s[2]].append(s)
    out = []
    for name, found in by_name.items():
        starts = sorted(enqueued.get(name, []))
        paired = len(starts) == len(found)
        for i, (a, b, _) in enumerate(sorted(found)):
            out.append([group, name, -1, -1, min(a, starts[i]) if paired else a, b])
    return out

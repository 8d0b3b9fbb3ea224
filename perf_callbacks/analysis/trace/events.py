"""One rank's trace, reduced while it streams in to the few event kinds the analysis needs (compact tuples)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import isfinite
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.trace.aside import (
    ASIDE,
    COMPILE_SUFFIX,
    COMPILING,
    DATA_WAIT,
    REPLAYS,
    is_loader_next,
    training_input,
)
from perf_callbacks.analysis.trace.extra_events import FOREIGN_MODULE_PREFIX, GATHER_OPS, ExtraEvents, nested_paths
from perf_callbacks.analysis.trace.loader import rank_from_name, read_trace
from perf_callbacks.analysis.trace.op_names import KNOWN as SHAPED_OPS
from perf_callbacks.analysis.trace.schema import (
    CATEGORY,
    GPU_CATS,
    GRAPH_LAUNCHES,
    HOLDING_CALLS,
    MODULE_PREFIX,
    OWN_SPAN_PREFIX,
    STEP_NUMBER,
    SYNC_CALLS,
    GpuRow,
    collective_name,
    mtia_kind,
)

_STEP = re.compile(r"ProfilerStep#(\d+)")
MAX_TS_US = 1e17
"""The largest timestamp believed, in microseconds (Kineto's are since the epoch, about 1.8e15 in 2027)."""
MAX_DUR_US = 7 * 86400e6
"""The longest event believed, in microseconds (a week): a longer ``dur`` (``1e300``) sets its event aside."""
_COMM_PREFIXES = ("gloo:", "nccl:")
_SPAN_PREFIXES = (OWN_SPAN_PREFIX, "ProfilerStep#", "enumerate(DataLoader)")
"""What every cpu op that is a span (ours, a step, a DataLoader fetch) starts with: one test sends the rest on."""
_NUMBERS = (int, float)

Span = tuple[float, float]


@dataclass
class RankTrace:
    r"""The events of one rank that the metrics use. Times are microseconds, as in the trace.

    Args:
        path: the trace file.
        rank: the global rank (``distributedInfo.rank``, else ``rank(\\d+)`` in the file name, else 0).
        meta: the trace's top-level keys other than ``traceEvents``.
    """

    path: Path
    rank: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    steps: list[tuple[int, float, float, Any]] = field(default_factory=list)
    gpu: list[GpuRow] = field(default_factory=list)
    launches: dict[int, tuple[float, int]] = field(default_factory=dict)
    syncs: list[tuple[float, float, str]] = field(default_factory=list)
    cpu_ops: list[tuple[float, float, Any, str]] = field(default_factory=list)
    ext_names: dict[int | str, str] = field(default_factory=dict)
    ext_spans: dict[int | str, tuple[float, float, Any]] = field(default_factory=dict)
    launch_tids: dict[int, Any] = field(default_factory=dict)
    data_spans: list[Span] = field(default_factory=list)
    data_names: set[str] = field(default_factory=set)
    own_data_spans: list[Span] = field(default_factory=list)
    loader_spans: list[tuple[float, float, str]] = field(default_factory=list)
    aside_spans: list[tuple[float, float, str]] = field(default_factory=list)
    phase_spans: list[tuple[float, float, str]] = field(default_factory=list)
    comm_spans: list[tuple[float, float, str]] = field(default_factory=list)
    graph_launches: dict[int, float] = field(default_factory=dict)
    device_kind: str = "cuda"
    rank_source: str = "order"
    bad_events: int = 0
    runtime_calls: int = 0
    python_events: int = 0
    profiler_ranges: int = 0
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    events: int = 0
    extra: ExtraEvents = field(default_factory=ExtraEvents)

    @property
    def has_gpu(self) -> bool:
        """Whether the trace holds device activity (kernels, copies or memsets)."""
        return bool(self.gpu)

    def flag(self, key: str) -> bool:
        """Whether a profiler option such as ``with_stack`` is set in the trace metadata ("1", 1 or true)."""
        return str(self.meta.get(key, "0")).lower() in ("1", "true")


class _Collector:
    """Sorts streamed events into a RankTrace; one method per event category keeps the dispatch flat."""

    def __init__(self, path: Path) -> None:
        self.trace = RankTrace(path)

    def reset(self) -> None:
        self.trace = RankTrace(self.trace.path)

    def add(self, events: list[dict[str, Any]]) -> None:
        """Sort one slice of events (a hot loop: each field read once, no call for the common checks).

        An event is believed when its ``ts`` is a number within :data:`MAX_TS_US` of 0 and its ``dur`` is absent, not a
        number, or at most :data:`MAX_DUR_US` (a ``dur`` that is not a positive number counts as 0, an instant).
        """
        t = self.trace
        t.events += len(events)
        category = CATEGORY.get
        for e in events:
            if e.__class__ is not dict:
                t.bad_events += 1
                continue
            cat = e.get("cat")
            kind = category(cat) if cat.__class__ is str else None
            if kind is None:
                continue
            ts, dur = e.get("ts"), e.get("dur")
            if ts.__class__ not in _NUMBERS or not -MAX_TS_US <= ts <= MAX_TS_US or (
                    dur.__class__ in _NUMBERS and not (dur <= MAX_DUR_US and dur == dur)):  # noqa: PLR0124 - NaN
                t.bad_events += 1
                continue
            if kind == "cpu_op":
                self._cpu_op(e, ts, dur)
            elif kind == "gpu":
                self._gpu(e, GPU_CATS[cat])
            elif kind == "runtime":
                self._runtime(e)
            elif kind == "annotation":
                self._annotation(e)
            else:
                self._other(e, kind)

    def _other(self, e: dict[str, Any], kind: str) -> None:
        """A CUPTI range, a Python function or an instant event (``[memory]``)."""
        t = self.trace
        if kind == "profiler_range":
            t.profiler_ranges += 1
        elif kind == "python":
            t.python_events += 1
            if str(e.get("name", "")).startswith(FOREIGN_MODULE_PREFIX):
                self._annotation(e)
        elif e.get("name") == "[memory]" and isinstance(e.get("args"), dict):
            self._memory(e["args"])
            t.extra.memory_event(e)

    def _cpu_op(self, e: dict[str, Any], ts: float, dur: Any) -> None:
        name = e.get("name", "")
        if name.__class__ is not str:
            name = str(name)
        if name.startswith(_SPAN_PREFIXES) and (name.startswith(OWN_SPAN_PREFIX) or _STEP.fullmatch(name)
                                                or is_loader_next(name)):
            self._annotation(e)  # our phase spans (fast record function), and PyTorch 1.8/1.9's `Operator` ranges
            return
        t = self.trace
        end = ts + (dur if dur.__class__ in _NUMBERS and dur > 0 and isfinite(dur) else 0.0)
        if name.endswith(COMPILE_SUFFIX):  # torch.compile compiling: set aside, as validation, never an operator
            t.aside_spans.append((ts, end, COMPILING))
            return
        args = e.get("args")
        if args.__class__ is not dict:
            args = {}
        tid = e.get("tid")
        if name == "record_param_comms" and args.get("Collective name"):
            name = f"record_param_comms ({collective_name(str(args['Collective name']))})"
            t.extra.cpu_op(args)
        t.cpu_ops.append((ts, end, tid, name))
        ext = args["External id"] if "External id" in args else args.get("external id")
        if ext is not None:
            t.ext_names[ext] = name
            t.ext_spans[ext] = (ts, end, tid)
            if name in SHAPED_OPS and "Input Dims" in args:
                t.extra.shapes[ext] = (args["Input Dims"], args.get("Input type"), args.get("Concrete Inputs"))
        if name in SYNC_CALLS:
            t.syncs.append((ts, end, name))
        elif name in GATHER_OPS and "Input Dims" in args:
            t.extra.gather_ops.append((ts, end, name, args["Input Dims"], args.get("Input type"), tid))
        seq = args.get("Sequence number")
        if seq is not None:
            t.extra.seq_op(ts, end, tid, name, seq)

    def _gpu(self, e: dict[str, Any], kind: str) -> None:
        args = _args(e)
        ts = e["ts"]
        device = args.get("device", e.get("pid", 0))
        name = str(e.get("name", ""))
        if e["cat"] == "mtia_ccp_events":
            self.trace.device_kind = "mtia"
            device = e.get("pid", 0)
            kind = mtia_kind(name)
            if kind == "memcpy" and isinstance(args.get("direction"), str):  # a DMA: its direction, for copy_kind
                name = f"{name} {args['direction']}"
        row = (ts, ts + _dur(e), kind, name, device if isinstance(device, int) else 0,
               args.get("correlation", -1), args.get("External id", args.get("external id", -1)))
        self.trace.gpu.append(row)
        self.trace.extra.gpu(row, args)

    def _runtime(self, e: dict[str, Any]) -> None:
        t, name, ts = self.trace, str(e.get("name", "")), e["ts"]
        args = _args(e)
        t.runtime_calls += 1
        if name.startswith("hip"):
            t.device_kind = "rocm"
        corr = args.get("correlation")
        if corr is not None:
            t.launches[corr] = (ts, args.get("External id", args.get("external id", -1)))
            t.extra.runtime(name, ts, _dur(e), corr)
            tid = e.get("tid")
            t.launch_tids[corr] = tid if isinstance(tid, (int, str)) else None
            if name in GRAPH_LAUNCHES:
                t.graph_launches[corr] = ts + _dur(e)
        if name in SYNC_CALLS or name in HOLDING_CALLS:
            t.syncs.append((ts, ts + _dur(e), name))

    def _annotation(self, e: dict[str, Any]) -> None:
        t, name, ts = self.trace, str(e.get("name", "")), e["ts"]
        end = ts + _dur(e)
        step = _STEP.fullmatch(name)
        if step:
            t.steps.append((int(step.group(1)), ts, end, e.get("tid")))
        elif name == DATA_WAIT:
            t.own_data_spans.append((ts, end))
        elif name in ASIDE:
            t.aside_spans.append((ts, end, ASIDE[name]))
        elif is_loader_next(name):
            t.loader_spans.append((ts, end, name))
        elif name.startswith(MODULE_PREFIX):
            t.extra.module_spans.append((ts, end, e.get("tid"), name[len(MODULE_PREFIX):]))
        elif name.startswith(FOREIGN_MODULE_PREFIX):
            t.extra.foreign_modules.append((ts, end, e.get("tid"), name[len(FOREIGN_MODULE_PREFIX):]))
        elif name.startswith(_COMM_PREFIXES):
            t.comm_spans.append((ts, end, name))
            t.extra.host_comm(ts, end, name, _args(e), e.get("tid"))
        elif name.startswith(OWN_SPAN_PREFIX):  # our phase spans: forward, backward, optimizer_step...
            t.phase_spans.append((ts, end, name[len(OWN_SPAN_PREFIX):]))

    def _memory(self, args: dict[str, Any]) -> None:
        if args.get("Device Type") != 1:
            return
        t = self.trace
        allocated, reserved = args.get("Total Allocated", 0), args.get("Total Reserved", 0)
        if isinstance(allocated, int) and isinstance(reserved, int):
            t.peak_allocated = max(t.peak_allocated or 0, allocated)
            t.peak_reserved = max(t.peak_reserved or 0, reserved)


def load_rank(path: Path) -> RankTrace:
    """Read one trace file into a RankTrace.

    Example:
        >>> import tempfile, json, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "rank3.pt.trace.json"
        >>> _ = p.write_text(json.dumps({"traceEvents": []}))
        >>> load_rank(p).rank
        3
    """
    collector = _Collector(path)
    meta = read_trace(path, collector)
    trace = collector.trace
    trace.meta = meta
    info = meta.get("distributedInfo") or {}
    rank = info.get("rank") if isinstance(info, dict) else None
    named = rank_from_name(path)
    if isinstance(rank, int) and not isinstance(rank, bool):
        trace.rank, trace.rank_source = rank, "distributedInfo"
    elif named is not None:
        trace.rank, trace.rank_source = named, "file name"
    # one span per step number
    trace.steps = sorted({s[STEP_NUMBER]: s for s in sorted(trace.steps, reverse=True)}.values())
    trace.gpu.sort()
    trace.syncs.sort(key=lambda s: s[1])
    trace.comm_spans.sort()
    if trace.profiler_ranges:  # the CUPTI range profiler replayed each kernel inside its launch call
        trace.aside_spans += [(ts, ts + dur, REPLAYS) for ts, dur in trace.extra.launch_calls.values()]
    if not trace.extra.module_spans and trace.extra.foreign_modules:  # another tool's trace: PyTorch's module spans
        trace.extra.module_spans = nested_paths(trace.extra.foreign_modules)
    trace.data_spans, trace.data_names = training_input(trace.own_data_spans, trace.loader_spans, trace.aside_spans)
    return trace


def _dur(e: dict[str, Any]) -> float:
    dur = e.get("dur", 0)
    return dur if type(dur) in (int, float) and isfinite(dur) and dur > 0 else 0.0


def _args(e: dict[str, Any]) -> dict[str, Any]:
    args = e.get("args")
    return args if isinstance(args, dict) else {}

"""One rank's trace, reduced while it streams in to the few event kinds the analysis needs (compact tuples)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.loader import rank_from_name, read_trace

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH_v2",
        "aten::item",
        "aten::_local_scalar_dense",
    }
)
DATA_WAIT = "perf_callbacks.data_wait"
OWN_SPAN_PREFIX = "perf_callbacks."
_STEP = re.compile(r"ProfilerStep#(\d+)")
_COMM_PREFIXES = ("gloo:", "nccl:")

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
    gpu: list[tuple[float, float, str, str, int, int, int]] = field(default_factory=list)
    launches: dict[int, tuple[float, int]] = field(default_factory=dict)
    syncs: list[tuple[float, float, str]] = field(default_factory=list)
    cpu_ops: list[tuple[float, float, Any, str]] = field(default_factory=list)
    ext_names: dict[int, str] = field(default_factory=dict)
    data_spans: list[Span] = field(default_factory=list)
    data_names: set[str] = field(default_factory=set)
    comm_spans: list[tuple[float, float, str]] = field(default_factory=list)
    python_events: int = 0
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    events: int = 0

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
        t = self.trace
        t.events += len(events)
        for e in events:
            cat = e.get("cat")
            if cat == "cpu_op":
                self._cpu_op(e)
            elif cat in GPU_CATS:
                self._gpu(e, GPU_CATS[cat])
            elif cat == "cuda_runtime" or cat == "cuda_driver":
                self._runtime(e)
            elif cat == "user_annotation":
                self._annotation(e)
            elif cat == "python_function":
                t.python_events += 1
            elif cat == "cpu_instant_event" and e.get("name") == "[memory]":
                self._memory(e["args"])

    def _cpu_op(self, e: dict[str, Any]) -> None:
        t, name, ts = self.trace, e["name"], e["ts"]
        if name.startswith(OWN_SPAN_PREFIX):  # our phase spans (fast record function): annotations, not operators
            self._annotation(e)
            return
        end = ts + e.get("dur", 0)
        t.cpu_ops.append((ts, end, e.get("tid"), name))
        ext = e.get("args", {}).get("External id")
        if ext is not None:
            t.ext_names[ext] = name
        if name in SYNC_CALLS:
            t.syncs.append((ts, end, name))

    def _gpu(self, e: dict[str, Any], kind: str) -> None:
        args = e.get("args", {})
        ts = e["ts"]
        row = (ts, ts + e.get("dur", 0), kind, e.get("name", ""), args.get("device", 0), args.get("correlation", -1),
               args.get("External id", -1))
        self.trace.gpu.append(row)

    def _runtime(self, e: dict[str, Any]) -> None:
        t, name, ts = self.trace, e.get("name", ""), e["ts"]
        args = e.get("args", {})
        corr = args.get("correlation")
        if corr is not None:
            t.launches[corr] = (ts, args.get("External id", -1))
        if name in SYNC_CALLS:
            t.syncs.append((ts, ts + e.get("dur", 0), name))

    def _annotation(self, e: dict[str, Any]) -> None:
        t, name, ts = self.trace, e.get("name", ""), e["ts"]
        end = ts + e.get("dur", 0)
        step = _STEP.fullmatch(name)
        if step:
            t.steps.append((int(step.group(1)), ts, end, e.get("tid")))
        elif name == DATA_WAIT or (name.startswith("enumerate(DataLoader)") and name.endswith("__next__")):
            t.data_spans.append((ts, end))
            t.data_names.add(name)
        elif name.startswith(_COMM_PREFIXES):
            t.comm_spans.append((ts, end, name))

    def _memory(self, args: dict[str, Any]) -> None:
        if args.get("Device Type") != 1:
            return
        t = self.trace
        t.peak_allocated = max(t.peak_allocated or 0, int(args.get("Total Allocated", 0)))
        t.peak_reserved = max(t.peak_reserved or 0, int(args.get("Total Reserved", 0)))


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
    trace.rank = int(rank) if rank is not None else (rank_from_name(path) or 0)
    trace.steps.sort()
    trace.gpu.sort()
    trace.syncs.sort(key=lambda s: s[1])
    trace.comm_spans.sort()
    return trace

"""One timeline for several ranks of a window: a single Chrome-trace file that Perfetto and chrome://tracing open.

Each chosen rank becomes one process (``pid`` = the rank, named ``rank N``); its device rows become threads of that
process. Each rank's events are put on the first chosen rank's clock (through their ``baseTimeNanoseconds``: wall
time) and shifted by the rank's remaining offset from the lowest rank
(:func:`perf_callbacks.analysis.judge.arrival.offsets_us`: 0 on one host, else estimated from the collectives' ends),
and flow ids are made unique per rank, so arrows never join two ranks. ``--ranks slowest,median,0`` (the default)
keeps the few ranks that matter in a large run: the culprit (else the slowest step time), the median rank and rank 0.

The file is named ``merged-ranks.pt.trace.json.gz`` by default and written into ``merged/`` inside the window's folder:
HTA (``TraceAnalysis(trace_dir=...)``) takes every ``.json``/``.gz`` file of the folder it is given as one rank, and a
merged file beside the per-rank traces took rank 0's place there (a file without ``distributedInfo.rank`` is rank 0
to HTA). In its own folder HTA loads it as one trace: its ``distributedInfo`` is the first chosen rank's (backend,
world size, process groups), with that rank's number. Discovery leaves the name out, so a later report of the folder
does not count it as another rank.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.judge.arrival import matched, offsets_us
from perf_callbacks.analysis.rank.arrivals import base_us
from perf_callbacks.analysis.results.result import AnalysisResult
from perf_callbacks.analysis.trace.discover import MERGED_NAME
from perf_callbacks.analysis.trace.loader import open_trace

DEFAULT_RANKS = "slowest,median,0"
MERGED_FOLDER = "merged"
"""The default file's folder, inside the window's: out of the folder HTA reads as the window's ranks."""
_THREADS = 10_000_000
"""Threads of a rank's other processes (its devices) are numbered from this many times their order, plus their id."""
_FLOWS = 1 << 40
"""Flow ids of rank ``r`` are moved up by ``r`` times this."""
_PROCESS_META = ("process_name", "process_labels", "process_sort_index")


def pick_ranks(result: AnalysisResult, spec: str = DEFAULT_RANKS) -> list[int]:
    """The ranks that ``spec`` names, in its order: numbers, ``slowest`` and ``median``.

    ``slowest`` is the culprit (:mod:`perf_callbacks.analysis.judge.arrival`), else the rank with the longest median
    step time; ``median`` the rank with the median step time.

    Raises:
        ValueError: for a word other than those, or a rank not in the window (the message lists its ranks).
    """
    by_time = sorted(result.ranks, key=lambda r: (r.step_time_ms or 0.0, r.rank))
    named = {"slowest": result.culprit["rank"] if result.culprit else by_time[-1].rank,
             "median": by_time[(len(by_time) - 1) // 2].rank}
    present = [r.rank for r in result.ranks]
    out: list[int] = []
    for word in (w.strip() for w in spec.split(",") if w.strip()):
        if word in named:
            rank = named[word]
        elif word.isdigit() and int(word) in present:
            rank = int(word)
        else:
            raise ValueError(f"--ranks: {word!r} is neither slowest, median nor a rank of this window (ranks: "
                             f"{', '.join(map(str, present))})")
        if rank not in out:
            out.append(rank)
    return out


def merge_ranks(result: AnalysisResult, spec: str = DEFAULT_RANKS, out: Path | None = None) -> Path:
    """Write the chosen ranks of ``result``'s window as one trace; returns its path.

    Args:
        result: the window's result (its ranks name their trace files).
        spec: which ranks (:func:`pick_ranks`).
        out: the file to write; default ``merged/MERGED_NAME`` in the folder of the first rank's trace (its
            folder is made).
    """
    chosen = pick_ranks(result, spec)
    by_rank = {r.rank: r for r in result.ranks}
    calls = matched(result.ranks)
    offsets = offsets_us(result.ranks, calls) if calls else {}
    events: list[dict[str, Any]] = []
    sources = {}
    base: float | None = None
    info: dict[str, Any] = {}
    for rank in chosen:
        doc = _load(Path(by_rank[rank].path))
        mine = base_us(doc) if isinstance(doc, dict) else 0.0
        if not info and isinstance(doc, dict) and isinstance(doc.get("distributedInfo"), dict):
            info = dict(doc["distributedInfo"])
        base = mine if base is None else base
        shift = offsets.get(rank, 0.0) + base - mine
        events += _rank_events(by_rank[rank].rank, doc, shift)
        sources[str(rank)] = {"file": Path(by_rank[rank].path).name, "clock_offset_us": offsets.get(rank, 0.0)}
    target = out or Path(by_rank[chosen[0]].path).parent / MERGED_FOLDER / MERGED_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schemaVersion": 1, "distributedInfo": {**info, "rank": chosen[0]}, "displayTimeUnit": "ms",
           "baseTimeNanoseconds": round((base or 0.0) * 1e3), "perfCallbacksMerged": sources, "traceEvents": events}
    opener = gzip.open if target.name.endswith(".gz") else open
    with opener(target, "wt", encoding="utf-8") as f:
        json.dump(doc, f)
    return target


def _load(path: Path) -> Any:
    with open_trace(path) as f:
        return json.load(f)


def _rank_events(rank: int, doc: Any, shift: float) -> list[dict[str, Any]]:
    """The events of ``rank``'s trace ``doc`` as one process ``pid = rank``, its clock moved by ``-shift`` us."""
    raw = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    pids: dict[Any, int] = {}
    out = [_meta("process_name", rank, {"name": f"rank {rank}"}),
           _meta("process_sort_index", rank, {"sort_index": rank})]
    for e in raw:
        if not isinstance(e, dict) or (e.get("ph") == "M" and e.get("name") in _PROCESS_META):
            continue
        e = dict(e)
        order = pids.setdefault(e.get("pid"), len(pids))
        e["pid"] = rank
        tid = e.get("tid")
        if order and isinstance(tid, int) and not isinstance(tid, bool):
            e["tid"] = order * _THREADS + tid
        ts = e.get("ts")
        if isinstance(ts, (int, float)) and not isinstance(ts, bool):
            e["ts"] = ts - shift
        for key in ("id", "bind_id"):
            if isinstance(e.get(key), int):
                e[key] += rank * _FLOWS
        out.append(e)
    return out


def _meta(name: str, pid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": 0, "args": args}

"""Deterministic CPU-only rank traces shaped like real gloo ones: the straggler tests' input, with no machine noise.

Every rank runs the same steps: a fetch, traced work, untraced host time (``extra_ms``, e.g. a ``time.sleep``), then
``collectives`` all_reduces that end together on every rank (each starts when the rank arrives and ends once the last
rank has arrived, plus the transfer). A logging step can add our own cross-rank gather inside a
``perf_callbacks.overhead`` span, as the engine writes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRANSFER_MS = 0.3
FETCH_MS = 0.2
WORK_MS = 3.0
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _span(cat: str, name: str, ts_ms: float, dur_ms: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts_ms * 1e3, "dur": dur_ms * 1e3,
            "args": {}}


def write_ranks(out: Path, extra_ms: list[list[float]], fetch_ms: list[list[float]] | None = None,
                collectives: int = 2, gather_at: tuple[int, ...] = (), log_ms: float = 2.0,
                first_step: int = 10) -> Path:
    """Write ``rank{R}.pt.trace.json`` for each rank into ``out``; return ``out``.

    Args:
        out: the window folder.
        extra_ms: per rank, per step: untraced host time before the first collective.
        fetch_ms: per rank, per step: the fetch's length (``FETCH_MS`` by default).
        collectives: all_reduces per step.
        gather_at: the indices of the steps whose end holds our own gather (logging steps).
        log_ms: how long rank 0 logs before it reaches the gather (the other ranks wait in it).
        first_step: the first ``ProfilerStep`` number.
    """
    world, steps = len(extra_ms), len(extra_ms[0])
    fetch = fetch_ms or [[FETCH_MS] * steps for _ in range(world)]
    events: list[list[dict[str, Any]]] = [[] for _ in range(world)]
    t = 0.0
    for s in range(steps):
        arrive = [t + fetch[r][s] + WORK_MS + extra_ms[r][s] for r in range(world)]
        for r in range(world):
            events[r] += [_span("user_annotation", LOADER, t, fetch[r][s]),
                          _span("cpu_op", "aten::mm", t + fetch[r][s], WORK_MS)]
        for _ in range(collectives):
            end = max(arrive) + TRANSFER_MS
            for r in range(world):
                events[r].append(_span("user_annotation", "gloo:all_reduce", arrive[r], end - arrive[r], tid=2))
            arrive = [end + 0.05] * world
        end = arrive[0]
        if s in gather_at:
            logged = [end + (log_ms if r == 0 else 0.0) for r in range(world)]
            done = max(logged) + TRANSFER_MS
            for r in range(world):
                events[r].append(_span("user_annotation", "perf_callbacks.overhead", end, done - end))
                events[r].append(_span("user_annotation", "gloo:all_gather", logged[r], done - logged[r], tid=2))
            end = done
        for r in range(world):
            events[r].append(_span("user_annotation", f"ProfilerStep#{first_step + s}", t, end - t))
        t = end + 0.01
    out.mkdir(parents=True, exist_ok=True)
    for r in range(world):
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": r, "world_size": world},
               "traceEvents": events[r]}
        (out / f"rank{r}.pt.trace.json").write_text(json.dumps(doc))
    return out

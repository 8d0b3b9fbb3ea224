"""Every second of one rank's run by part, from its step record and the clock readings written at close.

The step record (``analysis/diff/steps.py``) gives each completed step's time (its data wait included, the time set
aside left out), data wait and the user's set-aside time; its description's ``ledger`` (``core/engine/
ledger_stamps.py``) gives the process' start, the callback's construction, the first step's start, the open step at
close, the set-aside seconds by kind and the close. The parts (``PARTS``), in seconds:

- ``startup_before``: from the process' start to the callback's construction (our construction when the adapter
  gives none); ``startup``: from there to the first step's start.
- ``productive``: step time less data wait, less the parts below that steps hold.
- ``warmup``: the first step's compute time above the median; ``compile``: compiling steps' compute time above the
  median and torch.compile's compilation (set aside); a profiled step's above the median is ``own``;
  ``anomalous``: time above the median on steps over ``K_MIN`` x the median (and ``MIN_EXCESS_S`` above it);
  ``stalls``: the same on steps over the hang limit.
- ``data_wait``; ``worker_startup``: with a loader whose workers are not persistent, the time above the median of
  the step in which the next epoch's iterator started them and of the first fetch after it (without epoch
  boundaries in the record: fetches over ``K_MIN`` x the median wait).
- ``evaluation``, ``checkpoint``: the set-aside time by kind; ``set_aside``: the rest of it (all of it for a record
  that does not split it).
- ``own``: perf-callbacks' own work (export, logging, close); ``after``: from the last step's optimizer step to close.
- ``unaccounted``: the wall time less all of the above (small by construction: steps that were abandoned, rounding).

Example:
    >>> meta = {"ledger": {"engine_s": 0.0, "first_step_s": 1.0, "close_begin_s": 3.2, "close_s": 3.3,
    ...                    "open_step": {"step": 2, "ended": True, "begin_s": 3.0, "elapsed_s": 0.1, "wait_s": 0.0,
    ...                                  "aside_s": 0.0, "own_s": 0.0}}}
    >>> from perf_callbacks.analysis.diff.steps import StepRecord
    >>> rec = StepRecord(0, [0, 1], [1.0, 1.0], [8, 8], [0.0, 0.0], [0.0, 0.0], [0, 0], meta)
    >>> led = rank_ledger(rec)
    >>> round(led.parts["startup"], 3), round(led.parts["productive"], 3), round(led.parts["after"], 3)
    (1.0, 2.1, 0.1)
"""

from __future__ import annotations

import statistics
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.diff.steps import COLUMNS, COMPILED, WINDOW, StepRecord
from perf_callbacks.analysis.ledger.resume import Resumed, find_resumed

__all__ = ["K_MIN", "MIN_EXCESS_S", "PARTS", "Ledger", "rank_ledger"]
PARTS = ("startup_before", "startup", "productive", "warmup", "compile", "anomalous", "stalls", "data_wait",
         "worker_startup", "evaluation", "checkpoint", "set_aside", "own", "after", "unaccounted")
K_MIN = 2.5  # as capture_on_anomaly's bar (core/triggers/captures.py)
MIN_EXCESS_S = 0.05  # a shorter excess is the scheduler's


@dataclass
class Ledger:
    """One rank's wall time by part (seconds), with what the advice needs.

    Attributes:
        rank: the rank.
        wall_s: from the origin (``origin``) to the end of close.
        parts: seconds by ``PARTS`` name.
        origin: ``process`` (its start), ``previous_run`` (the end of the run before it in the same process: a
            sweep, several ``fit`` calls), ``callback`` (its construction: the process' start was not readable, or an
            interactive session, whose time before the run is the person's) or ``engine``.
        steps: completed steps.
        median_s: the median step time (data wait included).
        counts: set-aside occurrences by kind (``evaluation``, ``checkpoint``).
        spikes: the steps (by index) whose fetch was counted as worker start-up.
        interactive: the run was in an interactive session (a notebook's kernel, ``python -i``).
        resumed: the run resumed from a checkpoint, and what the run before it did again (``ledger/resume.py``).
        so_far: the run up to a window's end only, from its sidecar (the run did not close): no advice is drawn.
    """

    rank: int
    wall_s: float
    parts: dict[str, float]
    origin: str
    steps: int
    median_s: float
    counts: dict[str, int] = field(default_factory=dict)
    spikes: list[int] = field(default_factory=list)
    interactive: bool = False
    resumed: Resumed | None = None
    so_far: bool = False

    @property
    def goodput(self) -> float:
        """The productive share of the wall time."""
        return self.parts["productive"] / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: ``rank``, ``wall_s``, ``goodput``, ``origin``, ``steps``, the parts in seconds, ``resumed``."""
        return {"rank": self.rank, "wall_s": round(self.wall_s, 4), "goodput": round(self.goodput, 4),
                "origin": self.origin, "steps": self.steps,
                "parts": {k: round(v, 4) for k, v in self.parts.items()},
                **({"resumed": self.resumed.to_dict()} if self.resumed is not None else {}),
                **({"so_far": True} if self.so_far else {})}


def rank_ledger(record: StepRecord) -> Ledger | None:
    """The ledger of ``record``'s rank; None when its run did not close (no close readings in its description)."""
    st = record.meta.get("ledger")
    if not isinstance(st, dict) or "close_s" not in st or "close_begin_s" not in st:
        return None
    origin_name, origin = _origin(st)
    ours = float(st.get("callback_s", 0.0))
    parts = dict.fromkeys(PARTS, 0.0)
    parts["startup_before"] = ours - origin
    first, close_begin = st.get("first_step_s"), float(st["close_begin_s"])
    parts["startup"] = (first if first is not None else close_begin) - ours
    opened = st.get("open_step") if isinstance(st.get("open_step"), dict) else None
    keep = [i for i in range(len(record.step)) if opened is None or record.step[i] != opened["step"]]
    median, spikes = _steps(record, keep, st, parts, _workers(record.meta))
    _early(record, parts)
    _set_aside(record, keep, st, opened, parts)
    if opened is not None:
        _open_step(opened, close_begin, parts)
    parts["own"] += float(st["close_s"]) - close_begin
    wall = float(st["close_s"]) - origin
    parts["unaccounted"] = wall - sum(parts.values())
    counts = st.get("set_aside_count") or {}
    steps = len(keep) + (1 if opened is not None and opened["ended"] else 0)
    return Ledger(record.rank, wall, parts, origin_name, steps, median,
                  {"evaluation": int(counts.get("validation", 0)), "checkpoint": int(counts.get("checkpoint", 0))},
                  spikes, bool(st.get("interactive")), find_resumed(record))


def _origin(st: dict[str, Any]) -> tuple[str, float]:
    if st.get("previous_run_s") is not None:  # a later run of one process: from the end of the run before
        return "previous_run", float(st["previous_run_s"])
    if st.get("process_start_s") is not None:
        return "process", float(st["process_start_s"])
    if st.get("callback_s") is not None:
        return "callback", float(st["callback_s"])
    return "engine", 0.0


def _workers(meta: dict[str, Any]) -> bool:
    """The loader starts workers at each epoch: it has workers that are not persistent (unknown: maybe)."""
    loader = meta.get("ledger", {}).get("loader")
    if isinstance(loader, dict):
        return bool(loader.get("num_workers")) and not loader.get("persistent_workers")
    workers = (meta.get("machine") or {}).get("num_workers")
    return not isinstance(workers, int) or workers > 0


def _steps(record: StepRecord, keep: list[int], st: dict[str, Any], parts: dict[str, float],
           workers: bool) -> tuple[float, list[int]]:
    """The steps' compute time (productive, warm-up, compile, anomalous, stalls, worker start-up) and data wait.

    Returns the median step and the steps whose epoch started workers.
    """
    if not keep:
        return 0.0, []
    compute = {i: max(record.time_s[i] - record.wait_s[i], 0.0) for i in keep}
    plain = [compute[i] for i in keep[1:] if not record.flags[i]] or list(compute.values())
    med = statistics.median(plain)
    limit = st.get("hang_limit_s")
    epochs = st.get("epoch_starts")
    bounds = {d for d in epochs if d is not None} if isinstance(epochs, list) and workers else set()
    for n, i in enumerate(keep):
        c, excess = compute[i], max(compute[i] - med, 0.0)
        if int(record.flags[i]) & COMPILED:
            part = "compile"
        elif int(record.flags[i]) & WINDOW:  # profiled or FLOP-counted: the time above the median is ours
            part = "own"
        elif n == 0:
            part = "warmup"
        elif record.step[i] in bounds:  # the next epoch's iterator started its workers in this step's time
            part = "worker_startup"
        elif limit is not None and c > float(limit):
            part = "stalls"
        elif c > K_MIN * med and excess > MIN_EXCESS_S:
            part = "anomalous"
        else:
            part, excess = "productive", 0.0
        parts[part] += excess
        parts["productive"] += c - excess
    spikes = _waits(record, keep, bounds, epochs, workers, parts)
    return statistics.median([record.time_s[i] for i in keep]), spikes


def _waits(record: StepRecord, keep: list[int], bounds: set[int], epochs: Any, workers: bool,
           parts: dict[str, float]) -> list[int]:
    """Data wait, and worker start-up: the first fetch of each epoch that started workers, above the median wait.

    Without epoch boundaries in the record: fetches over ``K_MIN`` x the median wait. Returns the steps counted so.
    """
    waits = [record.wait_s[i] for i in keep]
    med_wait, spikes = statistics.median(waits), []
    first = {n for n in range(1, len(keep)) if record.step[keep[n - 1]] in bounds}
    if isinstance(epochs, list) and None in epochs:  # the first epoch's fetch waits for its workers too
        first.add(0)
    for n, w in enumerate(waits):
        spike = n in first if isinstance(epochs, list) else w > K_MIN * med_wait and w - med_wait > MIN_EXCESS_S
        if workers and spike and w > med_wait:
            parts["worker_startup"] += w - med_wait
            parts["data_wait"] += med_wait
        else:
            parts["data_wait"] += w
        if workers and spike:
            spikes.append(n)
    return spikes


def _early(record: StepRecord, parts: dict[str, float]) -> None:
    """Steps folded into ``-early.f32`` (runs over twice ``keep`` steps): their medians and means, as productive."""
    path = Path(record.path).with_name(Path(record.path).stem + "-early.f32") if record.path else None
    if path is None or not path.is_file():
        return
    rows = array("f")
    rows.frombytes(path.read_bytes()[: (path.stat().st_size // (4 * len(COLUMNS))) * 4 * len(COLUMNS)])
    w = len(COLUMNS)
    for j in range(0, len(rows), w):
        n = rows[j + 5]
        parts["productive"] += max(rows[j + 1] - rows[j + 3], 0.0) * n
        parts["data_wait"] += rows[j + 3] * n
        parts["set_aside"] += rows[j + 4] * n


def _set_aside(record: StepRecord, keep: list[int], st: dict[str, Any], opened: dict[str, Any] | None,
               parts: dict[str, float]) -> None:
    """The user's set-aside time by kind (the rest as ``set_aside``) and our own work inside steps."""
    total = sum(record.aside_s[i] for i in keep)
    if opened is not None:
        total += float(opened["aside_s"]) - float(opened["own_s"])
    kinds = st.get("set_aside")
    if not isinstance(kinds, dict):
        parts["set_aside"] += total
        return
    parts["evaluation"] += float(kinds.get("validation", 0.0))
    parts["checkpoint"] += float(kinds.get("checkpoint", 0.0))
    parts["compile"] += float(kinds.get("compile", 0.0))
    parts["own"] += float(kinds.get("own", 0.0))
    parts["set_aside"] += max(total - sum(float(kinds.get(k, 0.0)) for k in ("validation", "checkpoint", "compile")),
                              0.0)


def _open_step(opened: dict[str, Any], close_begin: float, parts: dict[str, float]) -> None:
    """The step open at close (the record has no row for it): its compute time, its wait, and the rest to close."""
    wait, aside = float(opened["wait_s"]), float(opened["aside_s"])
    span = close_begin - float(opened["begin_s"])
    parts["data_wait"] += wait
    if opened["ended"]:  # it completed: its time to its optimizer step; after it, the framework's until close
        elapsed = float(opened["elapsed_s"])
        parts["productive"] += max(elapsed - wait, 0.0)
        parts["after"] += span - elapsed - aside
    else:  # a fetch that found no batch (the end of an epoch), or a step abandoned
        parts["after"] += span - wait - aside

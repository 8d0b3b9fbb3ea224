"""Reading the run-wide step record (``core/engine/step_log.py``): every step's time, samples, wait and set-aside time.

``read_run(path)`` finds the record under a run folder (or an output dir: its most recently written run with one)
and returns one :class:`StepRecord` per rank; :func:`compared_steps` leaves out the steps ``diff`` never compares:
warm-up, profiled (or FLOP-counted) and compiling steps.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from perf_callbacks.core.context import RunContext
    >>> from perf_callbacks.core.engine.step_log import StepLog
    >>> run = Path(tempfile.mkdtemp())
    >>> log = StepLog(run, RunContext(run, "run"))
    >>> for step in range(30):
    ...     log.rows.append((step, 0.01, 32, 0.0, 0.0, 0))
    >>> log.flush()
    >>> [r] = read_run(run)
    >>> len(r.time_s), len(compared_steps(r).time_s)
    (30, 27)
"""

from __future__ import annotations

import json
import math
import re
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLUMNS = ("step", "time_s", "samples", "wait_s", "aside_s", "flags")
"""The record's row: one per completed optimizer step. ``time_s`` is the step's time (set-aside time left out);
``samples`` 0 is unknown; ``aside_s`` is the time set aside in it (validation, checkpoints, compilation: the user's;
perf-callbacks' own export and logging are left out)."""
WINDOW, COMPILED = 1, 4
"""``flags`` bits: the step's time is not its own (profiled in a window, or its ops ran through the FLOP counter); the
step compiled (its compilation is set aside, its first runs are not)."""
RECORD = re.compile(r"steps-rank(\d+)\.f32")
WARMUP_SHARE = 0.05
WARMUP_MIN = 3
"""The first ``max(WARMUP_MIN, WARMUP_SHARE * steps)`` steps are warm-up (allocator growth, autotuning, first runs)."""


@dataclass
class StepRecord:
    """One rank's steps, column by column (``COLUMNS`` of ``core/engine/step_log.py``), and its description."""

    rank: int
    step: list[float] = field(default_factory=list)
    time_s: list[float] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    wait_s: list[float] = field(default_factory=list)
    aside_s: list[float] = field(default_factory=list)
    flags: list[float] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    path: str = ""


def find_run(path: str | Path) -> Path | None:
    """The folder holding the step record: ``path`` itself, or the most recently written run folder under it."""
    root = Path(path)
    if root.is_file():
        root = root.parent
    if any(RECORD.fullmatch(p.name) for p in _files(root)):
        return root
    runs = [p.parent for p in root.rglob("steps-rank*.f32") if RECORD.fullmatch(p.name)] if root.is_dir() else []
    return max(runs, key=_newest) if runs else None


def read_run(path: str | Path) -> list[StepRecord]:
    """Each rank's record under ``path`` (see :func:`find_run`), rank order; [] when there is none.

    Raises:
        ValueError: when a record's file is not a whole number of rows.
    """
    run = find_run(path)
    if run is None:
        return []
    ranks = {int(m.group(1)): p for p in run.glob("steps-rank*.f32") if (m := RECORD.fullmatch(p.name))}
    return [read_record(ranks[r]) for r in sorted(ranks)]


def read_record(path: Path) -> StepRecord:
    """One rank's record: its rows and the JSON description next to it (``{}`` where missing or unreadable)."""
    match = RECORD.fullmatch(path.name)
    rows = array("f")
    data = path.read_bytes()
    width = len(COLUMNS)
    if len(data) % (4 * width):
        raise ValueError(f"{path}: {len(data)} bytes is not a whole number of {width}-column float32 rows")
    rows.frombytes(data)
    if sys.byteorder == "big":
        rows.byteswap()
    meta_path = path.with_suffix(".json")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    step, time_s, samples, wait_s, aside_s, flags = (list(rows[i::width]) for i in range(width))
    return StepRecord(int(match.group(1)) if match else 0, step, time_s, samples, wait_s, aside_s, flags,
                      meta=meta if isinstance(meta, dict) else {}, path=str(path))


def compared_steps(record: StepRecord) -> StepRecord:
    """The steps ``diff`` compares: flagged steps (profiled, FLOP-counted, compiling) and warm-up left out."""
    n = len(record.time_s)
    warm = max(WARMUP_MIN, math.ceil(WARMUP_SHARE * n))
    keep = [i for i in range(warm, n) if not record.flags[i] and record.time_s[i] > 0]
    step, time_s, samples, wait_s, aside_s, flags = ([getattr(record, c)[i] for i in keep] for c in COLUMNS)
    return StepRecord(record.rank, step, time_s, samples, wait_s, aside_s, flags, meta=record.meta, path=record.path)


def _newest(run: Path) -> float:
    """When the run's step record was last written."""
    return max(p.stat().st_mtime for p in run.glob("steps-rank*.f32"))


def _files(root: Path) -> list[Path]:
    try:
        return [p for p in root.iterdir() if p.is_file()] if root.is_dir() else []
    except OSError:
        return []

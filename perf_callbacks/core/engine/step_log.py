"""The run-wide step record: every optimizer step's time, samples, data wait and set-aside time, per rank.

A part of :class:`~perf_callbacks.core.engine.engine.PerfEngine` (``engine.steps``). The engine's hot path appends one
row of ``COLUMNS`` (``analysis/diff/steps.py``, which reads them) per completed step: one ``list.append`` of a tuple
(about 4 times cheaper than ``array.extend``), no call into this module. A logging step (once ``FLUSH_ROWS`` rows
wait or ``FLUSH_S`` seconds passed) and close append the rows to ``<run>/steps-rank{R}.f32`` (little-endian
float32, ``len(COLUMNS)`` a row) and rewrite ``<run>/steps-rank{R}.json``: the columns, the machine (CPU cores,
ranks, GPU, torch and framework versions) and the share of the time the training thread could run that it waited
for a CPU (its sleeps, I/O and device waits left out: a run that sleeps in a checkpoint is not a quieter machine).
``perf-callbacks diff`` reads them.

Bounded: the file keeps the last ``keep`` steps at full resolution; once it holds ``2 * keep``, the older half is
folded into ``steps-rank{R}-early.f32``: one row per ``SUMMARY_STEPS`` steps (the last step, the median time, and the
mean samples, wait and set-aside time; ``flags`` holds the steps it summarises).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from perf_callbacks.core.context import RunContext
    >>> log = StepLog(Path(tempfile.mkdtemp()), RunContext(Path("out"), "run"))
    >>> log.rows.append((0, 0.01, 32, 0.002, 0.0, 0))  # what the engine's hot path does
    >>> log.flush()
    >>> log.path.stat().st_size
    24
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import statistics
import sys
import time
from array import array
from itertools import chain
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.diff.steps import COLUMNS, COMPILED, WINDOW
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.engine.ledger_stamps import start_stamps
from perf_callbacks.core.timing.cpu_wait import ThreadWait
from perf_callbacks.core.windows.machine import machine_meta

__all__ = ["COLUMNS", "COMPILED", "FLUSH_ROWS", "FLUSH_S", "KEEP", "SUMMARY_STEPS", "WINDOW", "StepLog", "versions"]
KEEP = 100_000
FLUSH_ROWS, FLUSH_S = 4096, 30.0
"""A logging step writes the rows once this many wait or this many seconds passed since the last write."""
log = logging.getLogger(__name__)
SUMMARY_STEPS = 100
MAX_EPOCHS = 10_000  # epoch boundaries kept for the ledger
FRAMEWORKS = ("lightning", "pytorch_lightning", "accelerate", "transformers")


class StepLog:
    """One rank's step record: ``rows`` (filled by the engine), :meth:`flush` (at logging steps and close).

    Args:
        run_dir: the run's folder.
        ctx: the run's context (its rank, ranks and loader are written with the machine).
        cuda: the run trains on CUDA (the GPU's name is written).
        keep: steps kept at full resolution.
    """

    def __init__(self, run_dir: Path, ctx: RunContext, cuda: bool = False, keep: int = KEEP) -> None:
        self.path = run_dir / f"steps-rank{ctx.rank}.f32"
        self.meta_path = run_dir / f"steps-rank{ctx.rank}.json"
        self.early_path = run_dir / f"steps-rank{ctx.rank}-early.f32"
        self.rows: list[tuple[float, ...]] = []  # not yet written: the engine appends, flush() empties it in place
        self.keep, self.written, self.off, self.described = keep, 0, False, False
        self.machine = {**machine_meta(ctx, cuda), "world_size": ctx.world_size, "gpu": _gpu(ctx, cuda)}
        self.every_s, self._flushed = FLUSH_S, time.perf_counter()
        self._sched = ThreadWait()
        self._start = (time.perf_counter(), self._sched.sched())
        self.t0 = self._start[0]
        self.stamps: dict[str, Any] = start_stamps()  # the ledger's clock readings (core/engine/ledger_stamps.py)

    def epoch_start(self, done: int | None, loader: Any = None) -> None:
        """An epoch of ``loader`` starts after step ``done`` (None: before the first step).

        The ledger's DataLoader worker start-up is the boundary step's time above the median (the new iterator starts
        its workers) and the next fetch's wait above the median, for a loader with workers that are not persistent.
        """
        try:
            epochs = self.stamps.setdefault("epoch_starts", [])
            if len(epochs) < MAX_EPOCHS:
                epochs.append(done)
            loader = next(iter(getattr(loader, "flattened", None) or [loader]))  # a CombinedLoader: the first
            workers, persistent = getattr(loader, "num_workers", None), getattr(loader, "persistent_workers", None)
            if isinstance(workers, int):
                self.stamps["loader"] = {"num_workers": workers, "persistent_workers": bool(persistent)}
        except Exception:  # noqa: BLE001 - instrumentation must never break training
            log.debug("perf-callbacks: the ledger's epoch boundary was not noted", exc_info=True)

    def due(self) -> None:
        """At a logging step: :meth:`flush` once ``FLUSH_ROWS`` steps wait or ``FLUSH_S`` seconds passed.

        Else nothing: a logging step of a fast loop stays cheap.
        """
        if len(self.rows) >= FLUSH_ROWS or time.perf_counter() - self._flushed >= self.every_s:
            self.flush()

    def flush(self) -> None:
        """Append the rows so far to the file, fold the oldest when it is full, and rewrite the description.

        Never raises: a failure turns the record off with one log line (the traces' own writer warns about a folder
        that cannot be written; ``diff`` then compares windows).
        """
        self._flushed = time.perf_counter()
        if self.off or not (self.rows or self.written):
            return
        try:
            self._write()
        except Exception as err:  # noqa: BLE001 - instrumentation must never break training
            self.off = True
            self._discard()
            log.warning("perf-callbacks: the step record %s is off: %r; diff compares windows", self.path, err)

    def _discard(self) -> None:
        """After a failed write: no file of a record never described, and no run folder left empty by it."""
        with contextlib.suppress(OSError):
            self.meta_path.with_name(self.meta_path.name + ".tmp").unlink(missing_ok=True)
            if not self.described:  # rows without a description are no record
                self.path.unlink(missing_ok=True)
                self.early_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # only when empty

    def _write(self) -> None:
        if rows := self.rows:
            out = _little(array("f", chain.from_iterable(rows)))
            for attempt in (0, 1):  # a folder that a failed export removed while empty is made again
                self.path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    with self.path.open("ab") as f:
                        end = f.tell()
                        try:
                            out.tofile(f)
                            f.flush()
                        except OSError:  # a full disk: the file keeps whole rows only
                            f.truncate(end)
                            raise
                    break
                except FileNotFoundError:
                    if attempt:
                        raise
            self.written += len(rows)
            del rows[:]
            if self.written >= 2 * self.keep:
                self._fold()
        tmp = self.meta_path.with_name(self.meta_path.name + ".tmp")
        tmp.write_text(json.dumps(self.describe(), indent=1), encoding="utf-8")
        os.replace(tmp, self.meta_path)  # all or nothing
        self.described = True

    def describe(self) -> dict[str, Any]:
        """The JSON description: columns, flags, steps written, the machine and the CPU contention so far."""
        t0, sched0 = self._start
        wall, sched = time.perf_counter() - t0, self._sched.sched()
        ran, waited = (sched[0] - sched0[0], sched[1] - sched0[1]) if sched and sched0 else (0.0, 0.0)
        contention = waited / (ran + waited) if ran + waited > 0 else None  # of the time it could have run
        return {"columns": list(COLUMNS), "flags": {"window": WINDOW, "compiled": COMPILED},
                "steps": self.written, "keep": self.keep, "summary_steps": SUMMARY_STEPS,
                "machine": {**self.machine, **versions()},
                "cpu_contention": contention, "wall_s": wall,
                "ledger": {**self.stamps, **({"close_s": wall} if "close_begin_s" in self.stamps else {})}}

    def _fold(self) -> None:
        """Keep the last ``keep`` steps in the file; the older ones become one summary row per ``SUMMARY_STEPS``."""
        every = array("f")
        with self.path.open("rb") as f:
            every.fromfile(f, self.written * len(COLUMNS))
        every = _little(every)
        cut = (self.written - self.keep) * len(COLUMNS)
        old, width = every[:cut], len(COLUMNS)
        summary = array("f")
        chunk = SUMMARY_STEPS * width
        for i in range(0, len(old), chunk):
            part = old[i:i + chunk]
            n = len(part) // width
            col = [part[j::width] for j in range(width)]
            summary.extend((col[0][-1], statistics.median(col[1]), sum(col[2]) / n, sum(col[3]) / n,
                            sum(col[4]) / n, n))
        with self.early_path.open("ab") as f:
            _little(summary).tofile(f)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as f:
            _little(every[cut:]).tofile(f)
        tmp.replace(self.path)
        self.written = self.keep


def versions() -> dict[str, str]:
    """Torch's version and those of the training frameworks loaded in this process."""
    import torch

    out = {"torch": str(torch.__version__)}
    for name in FRAMEWORKS:
        module = sys.modules.get(name)
        if module is not None and isinstance(version := getattr(module, "__version__", None), str):
            out[name] = version
    return out


def _gpu(ctx: RunContext, cuda: bool) -> str | None:
    """The name of this rank's GPU (None without CUDA, or where it cannot be read)."""
    if not cuda or ctx.device is None:
        return None
    try:
        import torch

        return str(torch.cuda.get_device_name(ctx.device))
    except Exception:  # noqa: BLE001 - a name is not worth a failure
        return None


def _little(rows: array[float]) -> array[float]:
    """``rows`` in little-endian order (swapped in place on a big-endian machine)."""
    if sys.byteorder == "big":
        rows.byteswap()
    return rows

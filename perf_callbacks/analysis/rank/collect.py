"""Per-rank results for many trace files: from matching sidecars when present, else parsed, in parallel processes.

Each file is analysed on its own (``analyze_file``), so one bad file becomes one error line and the rest go on.
With ``jobs > 1`` the files are spread over a ``ProcessPoolExecutor`` started with ``spawn`` (no fork of a process
that may hold threads), and the number of processes is bounded by the memory that the largest file needs.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import struct
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.compute.mfu import flops_meta
from perf_callbacks.analysis.judge.verdict import judge_rank
from perf_callbacks.analysis.rank.rank import analyze_rank
from perf_callbacks.analysis.rank.sidecar_check import rank_from_sidecar
from perf_callbacks.analysis.results.result import RankResult
from perf_callbacks.analysis.trace.events import load_rank
from perf_callbacks.analysis.trace.loader import TraceError, paused_gc
from perf_callbacks.analysis.trace.sidecar_store import load_sidecar, read_sidecar, sidecar_path

log = logging.getLogger(__name__)
MIN_PARALLEL_BYTES = 16 << 20
"""Below this much JSON in all, starting processes costs more than it saves: the files are parsed in this process."""
MEMORY_PER_BYTE = 6
"""Peak resident memory of one analysis, as a multiple of the uncompressed trace size (measured: 4-5x)."""


@dataclass
class Loaded:
    """One trace file's outcome.

    Args:
        path: the trace file.
        result: its rank result, None when it could not be analysed.
        error: one line (file name and reason) when it could not.
        meta: the sidecar's ``meta`` when the result came from a sidecar.
        notes: what was set aside in reading it (a damaged sidecar).
    """

    path: Path
    result: RankResult | None = None
    error: str | None = None
    meta: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def analyze_file(path: Path, top_k: int = 10) -> Loaded:
    """Parse and analyse one trace file; never raises for a bad file (the reason goes to ``error``)."""
    try:
        with paused_gc():
            trace = load_rank(path)
            result = analyze_rank(trace, top_k)
    except TraceError as err:
        return Loaded(path, error=str(err))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as err:
        return Loaded(path, error=f"{path}: malformed events ({type(err).__name__}: {err})")
    if result is None:
        what = f"{trace.events} events, {trace.bad_events} malformed" if trace.events else "no events"
        return Loaded(path, error=f"{path}: no profiled events ({what}; no op, kernel or ProfilerStep)")
    judge_rank(result)
    result.flops = flops_meta(trace.meta)
    return Loaded(path, result=result)


def load_all(groups: list[list[Path]], top_k: int = 10, jobs: int = 1, sidecars: bool = True) -> dict[Path, Loaded]:
    """Analyse every file; ``jobs`` > 1 parses in that many processes at most.

    Args:
        groups: the files of each window. A window whose every file has a matching sidecar is read from the sidecars;
            any other window is parsed.
        top_k: how many top ops to keep per rank.
        jobs: the most files parsed at once.
        sidecars: whether to use sidecars at all.
    """
    out: dict[Path, Loaded] = {}
    todo: list[Path] = []
    for files in groups:
        found = [from_sidecar(f) for f in files] if sidecars else [None]
        if all(found):
            out.update((x.path, x) for x in found if x is not None)
        else:
            todo += files
    _parse(out, todo, top_k, jobs)
    for f in todo if sidecars else []:
        if (note := sidecar_aside(f)) is not None:
            out[f].notes.append(note)
    return out


def _parse(out: dict[Path, Loaded], todo: list[Path], top_k: int, jobs: int) -> None:
    workers = min(jobs, len(todo), memory_bound_jobs(todo))
    if workers <= 1 or sum(_uncompressed_size(f) for f in todo) < MIN_PARALLEL_BYTES:
        out.update((f, analyze_file(f, top_k)) for f in todo)
        return
    try:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_leave_sigint) as pool:
            try:
                out.update(zip(todo, pool.map(analyze_file, todo, repeat(top_k)), strict=True))
            except KeyboardInterrupt:  # Ctrl-C: stop the workers now, not after the files they are parsing
                _stop(pool)
                raise
    except (BrokenProcessPool, OSError) as err:  # e.g. a script without `if __name__ == "__main__":`
        log.warning("perf-callbacks: parallel analysis failed (%s); analysing one file at a time", err)
        out.update((f, analyze_file(f, top_k)) for f in todo if f not in out)


def _leave_sigint() -> None:
    """In a worker: ignore Ctrl-C, which the terminal sends to the whole process group; the parent stops us."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers at once (``shutdown`` alone waits for the files they are parsing)."""
    processes = list(getattr(pool, "_processes", {}).values())  # no public way to reach them
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


def from_sidecar(path: Path) -> Loaded | None:
    """The result kept in ``path``'s sidecar; None without a matching sidecar or when its content is malformed."""
    side = read_sidecar(path)
    result = rank_from_sidecar(side) if side is not None else None
    if side is None or result is None:
        return None
    result.path = str(path)
    return Loaded(path, result=result, meta=side.get("meta") or {})


def sidecar_aside(path: Path) -> str | None:
    """Why the sidecar next to ``path`` was set aside as damaged (unreadable, or values no trace gives), else None."""
    side, why = load_sidecar(path)
    if why is not None or side is None or "rank" not in side or rank_from_sidecar(side) is not None:
        return why
    return (f"{sidecar_path(path).name} set aside (a value of the wrong type, or one no trace gives: not finite, "
            "negative or out of range); its trace was parsed")


def default_jobs() -> int:
    """The number of CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def memory_bound_jobs(files: list[Path]) -> int:
    """How many files of this size fit in the available memory at once (at least 1)."""
    if not files:
        return 1
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not on Linux
        return len(files)
    need = max(_uncompressed_size(f) for f in files) * MEMORY_PER_BYTE + (64 << 20)
    return max(1, int(available // need))


def _uncompressed_size(path: Path) -> int:
    """Size of the JSON text: a gzip file's ISIZE trailer (its size modulo 4 GiB), else the file size."""
    try:
        size = path.stat().st_size
        if not path.name.endswith(".gz") or size < 18:
            return size
        with path.open("rb") as f:
            f.seek(-4, os.SEEK_END)
            return max(int(struct.unpack("<I", f.read(4))[0]), size)
    except OSError:
        return 0

"""Out-of-memory forensics: when a rank dies of ``torch.OutOfMemoryError``, leave the evidence in ``oom-rank{R}/``.

- ``summary.txt`` (also printed on that rank, each line prefixed ``perf-callbacks:``): step, phase, batch shapes,
  allocated/reserved/peak/total, largest live allocations, fragmentation, the last per-phase peaks, and advice;
- ``memory_summary.txt``: ``torch.cuda.memory_summary()`` (CUDA);
- ``snapshot.pickle``: the caching allocator's state and history when ``memory_history`` is on, for
  https://pytorch.org/memory_viz.

On CUDA, torch's OOM observer hands us the failing allocation before the exception is raised, so the device state and
the snapshot are taken there (the stack of the failing ``malloc`` is still in the history); the engine's ``close``
then writes the files. Nothing here raises or touches the exception.

Example:
    >>> import tempfile, pathlib, torch
    >>> from perf_callbacks.core.memory.sampler import OutOfMemoryError  # torch.OutOfMemoryError from torch 2.5
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> oom = OOMForensics(memory_history=0, rank=0, run_dir=run, device=None)
    >>> path = oom.on_oom(OutOfMemoryError("out of memory"), step=3, phase="forward", batch=torch.zeros(4, 2),
    ...                   echo=False)
    >>> sorted(p.name for p in path.iterdir())
    ['summary.txt']
"""

from __future__ import annotations

import logging
import os
import pickle
import resource
import sys
import weakref
from pathlib import Path
from typing import Any

import torch

from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.core.files.traces import write_text
from perf_callbacks.core.memory.oom_report import OOMFacts, format_summary
from perf_callbacks.core.memory.parts import Owners, measure
from perf_callbacks.core.memory.phase_peaks import PhasePeaks
from perf_callbacks.core.memory.sampler import host_rss_bytes

log = logging.getLogger(__name__)
_TOP_ALLOCATIONS = 5


class OOMForensics:
    """Writes the OOM folder of one rank, and owns allocator-history recording (``memory_history``).

    Args:
        memory_history: allocator-history entries to keep (0: off). CUDA only.
        rank: global rank (names the folder).
        run_dir: the run folder; the evidence goes to ``run_dir/oom-rank{rank}``.
        device: this rank's device; None or CPU gives host-side numbers only.
        peaks: the per-phase peak tracker, if any, for its last measurement.
        start: optimizer step at which history recording starts (``memory_history_start``); None: the first window.
        outputs: the run's writers: a snapshot or an OOM folder that cannot be written turns ``snapshots`` or ``oom``
            off with one warning (default: a guard of its own).
    """

    def __init__(self, memory_history: int, rank: int, run_dir: Path, device: torch.device | None,
                 peaks: PhasePeaks | None = None, start: int | None = None, outputs: Outputs | None = None) -> None:
        self.memory_history, self.rank, self.run_dir, self.peaks = memory_history, rank, run_dir, peaks
        self.outputs = outputs or Outputs()
        self.device = device if device is not None and device.type == "cuda" else None
        self.start = start
        self.recording = False
        self.captured: dict[str, Any] | None = None  # device state taken by the OOM observer
        self.owners: Owners | None = None  # the run's models and optimizers: their bytes by part at the failure
        if self.device is not None:
            _attach_observer(self)

    # ---- allocator history -----------------------------------------------------------------------------------------
    @property
    def wants_step_hook(self) -> bool:
        """True when recording must start at a given step, so the engine has to tell it about step starts."""
        return self.device is not None and self.memory_history > 0 and self.start is not None

    def window_started(self, step: int) -> None:
        """A profiling window starts: recording begins here unless ``memory_history_start`` is set."""
        if self.start is None:
            self.start_history(step)

    def start_history(self, step: int) -> None:
        """Start recording allocator history (CUDA, ``memory_history > 0``); once."""
        if self.recording or self.device is None or self.memory_history <= 0:
            return
        torch.cuda.memory._record_memory_history(max_entries=self.memory_history, stacks="python", device=self.device)
        self.recording = True
        log.info("perf-callbacks: recording allocator history from step %d (%d entries)", step, self.memory_history)

    def window_snapshot(self, window_dir: Path) -> None:
        """Write ``rank{R}.snapshot.pickle`` next to the window's traces while history is recorded. Never raises."""
        if self.recording and self.outputs.enabled("snapshots"):
            path = window_dir / f"rank{self.rank}.snapshot.pickle"
            self.outputs.call("snapshots", lambda: _dump(torch.cuda.memory._snapshot(self.device), path, mkdir=True),
                              path)

    def stop_history(self) -> None:
        """Stop recording (end of training)."""
        if self.recording:
            self.recording = False
            torch.cuda.memory._record_memory_history(enabled=None, device=self.device)

    # ---- the failure ---------------------------------------------------------------------------------------------
    def observe(self, alloc: int, device_free: int) -> None:
        """Torch's OOM observer: take the device state at the failing allocation (the exception is not raised yet)."""
        self.captured = _cuda_state(self.device, snapshot=self.recording)

    def on_oom(self, exc: BaseException, step: int | None, phase: str | None, batch: Any = None,
               echo: bool = True) -> Path | None:
        """Write ``oom-rank{R}/`` and print the summary; returns the folder, or None if writing failed. Never raises.

        A folder that cannot be written (a full disk) is warned about once, with the cause; the summary is still
        printed.
        """
        try:
            return self._write(exc, step, phase, batch, echo)
        except Exception as err:  # noqa: BLE001 - forensics must never mask the original error
            log.warning("perf-callbacks: could not write the out-of-memory evidence (%s: %s)", type(err).__name__, err)
            return None

    def _write(self, exc: BaseException, step: int | None, phase: str | None, batch: Any, echo: bool) -> Path | None:
        at_alloc, state = self.captured is not None, self.captured or _cuda_state(self.device, self.recording)
        self.captured = None
        facts = OOMFacts(rank=self.rank, step=step, phase=phase, error=f"{type(exc).__name__}: {exc}".strip(),
                         batch=describe_batch(batch))
        facts.host_rss, facts.host_peak_rss, facts.host_total = _host_state()
        if state:
            _fill_device(facts, state, "at the failing allocation" if at_alloc else facts.captured)
        if self.owners is not None:
            facts.categories = _categories(self.owners, self.device)
        if self.peaks is not None:
            facts.phase_peaks, facts.phase_peaks_step = dict(self.peaks.last), self.peaks.step
        folder: Path | None = self.run_dir / f"oom-rank{self.rank}"
        try:
            self._write_files(self.run_dir / f"oom-rank{self.rank}", state, facts)
        except OSError as err:
            self.outputs.failed("oom", err, folder)
            folder = None
        text = format_summary(facts)
        if echo:
            print("".join(f"perf-callbacks: {line}\n" for line in text.splitlines()), end="", file=sys.stderr,
                  flush=True)
        return folder

    def _write_files(self, folder: Path, state: dict[str, Any], facts: OOMFacts) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if self.device is not None:
            write_text(folder / "memory_summary.txt", state["summary"])
            facts.files.append("memory_summary.txt")
        if state.get("snapshot") is not None:
            _dump(state["snapshot"], folder / "snapshot.pickle")
            facts.files.append("snapshot.pickle")
        write_text(folder / "summary.txt", format_summary(facts))


def describe_batch(batch: Any, limit: int = 8) -> str | None:
    """``size 8; shapes: float32[8, 16], int64[8]`` for tensors found in a batch (nested lists, tuples, dicts)."""
    tensors: list[torch.Tensor] = []
    _collect(batch, tensors, limit)
    if not tensors:
        return None
    shapes = ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in tensors)
    size = next((t.shape[0] for t in tensors if t.dim()), None)
    return (f"size {size}; " if size is not None else "") + f"shapes: {shapes}"


def batch_from_traceback(exc: BaseException) -> Any:
    """The innermost ``batch`` local in the exception's frames (Lightning's loop and ``training_step`` have one)."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        found = tb.tb_frame.f_locals.get("batch", found)
        tb = tb.tb_next
    return found


def _collect(obj: Any, out: list[torch.Tensor], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _collect(v, out, limit)
    elif isinstance(obj, list | tuple):
        for v in obj:
            _collect(v, out, limit)


def _categories(owners: Owners, device: torch.device | None) -> dict[str, int]:
    """Parameters, gradients and optimizer state at the failure, on the device (the host on CPU); {} if unreadable."""
    try:
        models, optimizers = owners()
        return measure(models, optimizers, device.type if device is not None else "cpu")
    except Exception:  # noqa: BLE001 - forensics must never mask the original error
        log.debug("could not measure the memory parts", exc_info=True)
        return {}


def _host_state() -> tuple[int, int, int | None]:
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
    try:
        total: int | None = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = None
    return host_rss_bytes(), peak, total


def _cuda_state(device: torch.device | None, snapshot: bool) -> dict[str, Any]:
    if device is None:
        return {}
    stats = torch.cuda.memory_stats_as_nested_dict(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    segments = [s for s in _segments() if s.get("device", index) == index]
    blocks = [b for s in segments for b in s.get("blocks", [])]
    return {
        "allocated": stats.get("allocated_bytes", {}).get("all", {}).get("current", 0),
        "reserved": stats.get("reserved_bytes", {}).get("all", {}).get("current", 0),
        "peak": stats.get("allocated_bytes", {}).get("all", {}).get("peak", 0),
        "total": torch.cuda.get_device_properties(index).total_memory,
        "largest": sorted((b["size"] for b in blocks if b.get("state") == "active_allocated"), reverse=True),
        "largest_free": max((b["size"] for b in blocks if b.get("state") == "inactive"), default=0),
        "summary": torch.cuda.memory_summary(device),
        "snapshot": torch.cuda.memory._snapshot(device) if snapshot else None,
    }


def _segments() -> list[dict[str, Any]]:
    try:
        return list(torch.cuda.memory_snapshot(include_traces=False))  # type: ignore[no-untyped-call]
    except TypeError:  # torch before include_traces (which leaves the history entries out: faster)
        return list(torch.cuda.memory_snapshot())  # type: ignore[no-untyped-call]


def _fill_device(facts: OOMFacts, state: dict[str, Any], captured: str) -> None:
    facts.allocated, facts.reserved, facts.peak = state["allocated"], state["reserved"], state["peak"]
    facts.total, facts.largest_free_block = state["total"], state["largest_free"]
    facts.largest_allocations = list(state["largest"][:_TOP_ALLOCATIONS])
    facts.captured = captured


def _dump(snapshot: Any, path: Path, mkdir: bool = False) -> None:
    """Pickle ``snapshot`` to ``path`` through a hidden temporary name; on failure nothing is left behind."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        if mkdir:
            path.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb") as f:
            pickle.dump(snapshot, f)
        os.replace(partial, path)
    except OSError as err:
        if err.filename is None:  # pickle's write names no file
            err.filename = str(path)
        raise
    finally:
        partial.unlink(missing_ok=True)


# torch keeps every observer for the life of the process (there is no detach), so one process-wide observer forwards
# to the live OOMForensics objects; a finished run's object is simply gone from the set.
_live: weakref.WeakSet[OOMForensics] = weakref.WeakSet()
_attached = False


def _attach_observer(forensics: OOMForensics) -> None:
    global _attached
    _live.add(forensics)
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if _attached or attach is None:
        return
    try:
        torch.cuda.init()  # type: ignore[no-untyped-call]  # the allocator attaches observers to the devices it has already set up
        attach(_observer)
        _attached = True
    except RuntimeError as err:  # e.g. the cudaMallocAsync backend has no observers: the exception path remains
        log.info("perf-callbacks: no CUDA OOM observer (%s); OOM evidence is taken when the exception arrives", err)


def _observer(device: int, alloc: int, device_total: int, device_free: int) -> None:
    for forensics in list(_live):
        if forensics.device is not None and forensics.device.index in (None, device):
            try:
                forensics.observe(alloc, device_free)
            except Exception:  # noqa: BLE001 - never raise into the allocator
                log.debug("OOM observer failed", exc_info=True)

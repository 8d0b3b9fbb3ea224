"""The evidence of a hang, written by the watchdog (``core/hang/watchdog.py``) into ``hang-rank{R}/``.

- ``stacks.txt``: every thread's Python stack, from ``faulthandler.dump_traceback(all_threads=True)`` (also the
  threads that hold the GIL in C code print their Python frames);
- ``hang.json`` (``perf-callbacks-hang/1``): the rank, open step and phase, how long no step completed, the timeout,
  and every thread's stack as data (file, line, function; ``library`` for the standard library and installed
  packages), the training thread marked: what ``perf-callbacks report`` reads;
- ``flight_recorder.json`` (and ``flight_recorder_nccl.json`` with NCCL): torch's Flight Recorder of the rank's last
  collectives (``torch._C._distributed_c10d._dump_fr_trace_json``), where the process group has one. It is written
  last: a dump that blocks leaves the rest in place.

Nothing here raises: each file is whole or absent (written under a temporary name, synced, renamed; the partial file
removed on failure), a failure to write one is logged at debug level and the others are still written, and the line
on stderr names only the files written.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import json
import logging
import os
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from perf_callbacks.core.warn import quiet

__all__ = ["FORMAT", "HangFacts", "mark_resumed", "thread_stacks", "training_thread_compiling", "write_hang"]
log = logging.getLogger(__name__)
FORMAT = "perf-callbacks-hang/1"
MAX_FRAMES = 60  # innermost frames kept per thread in hang.json (stacks.txt keeps faulthandler's 100)
_COMPILERS = (f"torch{os.sep}_dynamo{os.sep}", f"torch{os.sep}_inductor{os.sep}")
_LIBRARY_DIRS = tuple(
    {
        os.path.normcase(p) + os.sep
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_paths().get(key))
    }
)
_FLIGHT_RECORDERS = (
    ("_dump_fr_trace_json", "flight_recorder.json"),
    ("_dump_nccl_trace_json", "flight_recorder_nccl.json"),
)


@dataclass
class HangFacts:
    """What the watchdog knows when it fires (``hang.json`` adds the stacks and the files written)."""

    rank: int
    step: int | None
    phase: str | None
    steps_run: int
    waited_s: float
    timeout_s: float
    aside: str | None
    training_thread: int
    extra: dict[str, Any] = field(default_factory=dict)


def write_hang(folder: Path, facts: HangFacts) -> Path:
    """Write ``folder`` (stacks, ``hang.json``, then the Flight Recorder) and say so on stderr; returns ``folder``.

    Each file is whole or absent (see :func:`_atomic`), and the line on stderr names only the files written; a file
    that could not be written is one clause of it (the error's traceback goes to the debug log).
    """
    failed: list[str] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        log.debug("perf-callbacks: could not create %s", folder, exc_info=True)
        _say(facts, folder, [], [f"{folder} could not be created ({_error(err)})"])
        return folder
    written = ["stacks.txt"] if _tried(lambda: _write_faulthandler(folder / "stacks.txt"), "stacks.txt", failed) else []
    data = {
        "format": FORMAT,
        **asdict(facts),
        "time": time.time(),
        "pid": os.getpid(),
        "threads": thread_stacks(facts.training_thread),
        "flight_recorder": [],
        "resumed": None,
    }
    data.update(data.pop("extra"))
    if _tried(lambda: _write_json(folder / "hang.json", data), "hang.json", failed):
        written.append("hang.json")
    _say(facts, folder, written, failed)
    for name, file in _FLIGHT_RECORDERS:
        if quiet(functools.partial(_write_flight_recorder, name, folder / file)):
            data["flight_recorder"].append(file)
            quiet(lambda: _write_json(folder / "hang.json", data))
    return folder


def _say(facts: HangFacts, folder: Path, written: list[str], failed: list[str]) -> None:
    """The one line on stderr: what happened, and where the evidence is, naming only the files written."""
    if written == ["stacks.txt", "hang.json"]:
        where = f"every thread's stack and the last collectives are in {folder}"
    elif written:
        where = f"{' and '.join(written)} in {folder}; " + "; ".join(failed)
    else:
        where = "no evidence was written: " + "; ".join(failed)
    print(
        f"perf-callbacks: rank {facts.rank}: no step completed for {facts.waited_s:.0f} s (step {facts.step}, "
        f"phase {facts.phase}); {where}; it is not stopped: `perf-callbacks report {folder.parent}` says which rank "
        "is where",
        file=sys.stderr,
        flush=True,
    )


def _tried(write: Callable[[], None], name: str, failed: list[str]) -> bool:
    """``write()``; False, with why added to ``failed``, when it raised (its traceback goes to the debug log)."""
    try:
        write()
    except Exception as err:  # noqa: BLE001 - the watchdog never raises
        log.debug("perf-callbacks: could not write %s", name, exc_info=True)
        failed.append(f"{name} could not be written ({_error(err)})")
        return False
    return True


def _error(err: BaseException) -> str:
    return f"{type(err).__name__}: {err.strerror}" if isinstance(err, OSError) and err.strerror else \
        f"{type(err).__name__}: {err}"


def mark_resumed(folder: Path, steps_run: int, after_s: float) -> None:
    """Steps resumed ``after_s`` seconds after ``folder`` was written: a stall, not a hang; ``hang.json`` says so."""

    def update() -> None:
        path = folder / "hang.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        data["resumed"] = {"steps_run": steps_run, "after_s": round(after_s, 3)}
        _write_json(path, data)

    quiet(update)


def thread_stacks(training_thread: int) -> list[dict[str, Any]]:
    """Every thread's Python stack as data, innermost frame last, the training thread first."""
    names = {t.ident: t.name for t in threading.enumerate()}
    own = threading.get_ident()
    out = [
        {"id": ident, "name": names.get(ident, "?"), "training": ident == training_thread, "frames": _frames(frame)}
        for ident, frame in sys._current_frames().items()
        if ident != own or ident == training_thread  # the watchdog's own stack is noise
    ]
    return sorted(out, key=lambda t: not t["training"])


def training_thread_compiling(ident: int) -> bool:
    """Whether the training thread's stack is in torch.compile's compiler (dynamo or inductor) right now."""
    frame = sys._current_frames().get(ident)
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in _COMPILERS):
            return True
        frame = frame.f_back
    return False


def _frames(frame: FrameType) -> list[dict[str, Any]]:
    summary = traceback.extract_stack(frame, limit=MAX_FRAMES)
    return [
        {"file": f.filename, "line": f.lineno, "function": f.name, "library": _library(f.filename)} for f in summary
    ]


def _library(filename: str) -> bool:
    """The standard library, an installed package or a frozen module: not the user's code."""
    name = os.path.normcase(filename)
    return filename.startswith("<") or name.startswith(_LIBRARY_DIRS) or "perf_callbacks" + os.sep in name


def _write_faulthandler(path: Path) -> None:
    """Faulthandler's dump of every thread, through memory.

    Faulthandler ignores its own write errors (a full disk would leave an empty or cut file), so its text is written
    by :func:`_atomic`, which does not.
    """
    with _scratch() as f:
        faulthandler.dump_traceback(f, all_threads=True)
        f.seek(0)
        text = f.read()
    _atomic(path, text)


def _scratch() -> IO[str]:
    """A file in memory with a descriptor (``memfd`` on Linux), else a temporary file."""
    if hasattr(os, "memfd_create"):
        return open(os.memfd_create("perf-callbacks-stacks"), "w+", encoding="utf-8")
    return tempfile.TemporaryFile("w+", encoding="utf-8")


def _write_flight_recorder(name: str, path: Path) -> bool:
    """The Flight Recorder's dump, where torch.distributed is loaded and initialized and has this kind of recorder."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return False
    c10d = sys.modules.get("torch._C._distributed_c10d")
    dump = getattr(c10d, name, None)
    if dump is None:
        return False
    raw = dump(True, False)  # includeCollectives, onlyActive=False: the completed ones say where each rank got to
    data = json.loads(raw)
    if not data.get("entries"):  # the buffer is off (TORCH_FR_BUFFER_SIZE=0) or nothing ran on it
        return False
    _write_json(path, data)
    return True


def _write_json(path: Path, data: Any) -> None:
    _atomic(path, json.dumps(data, indent=1, default=str))


def _atomic(path: Path, text: str) -> None:
    """``path`` whole or not at all.

    Written under a temporary name, synced, then renamed; the partial file is removed when that fails (a full disk),
    and the error raised.
    """
    tmp = path.with_name(f".{path.name}.partial")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise

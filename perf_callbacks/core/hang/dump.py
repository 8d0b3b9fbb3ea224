"""The evidence of a hang, written by the watchdog (``core/hang/watchdog.py``) into ``hang-rank{R}/``.

- ``stacks.txt``: every thread's Python stack, from ``faulthandler.dump_traceback(all_threads=True)`` (also the
  threads that hold the GIL in C code print their Python frames);
- ``hang.json`` (``perf-callbacks-hang/1``): the rank, open step and phase, how long no step completed, the timeout,
  and every thread's stack as data (file, line, function; ``library`` for the standard library and installed
  packages), the training thread marked: what ``perf-callbacks report`` reads;
- ``flight_recorder.json`` (and ``flight_recorder_nccl.json`` with NCCL): torch's Flight Recorder of the rank's last
  collectives (``torch._C._distributed_c10d._dump_fr_trace_json``), where the process group has one. It is written
  last: a dump that blocks leaves the rest in place.

Nothing here raises: a failure to write one file is logged and the others are still written.
"""

from __future__ import annotations

import faulthandler
import functools
import json
import logging
import os
import sys
import sysconfig
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

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
    """Write ``folder`` (stacks, ``hang.json``, then the Flight Recorder) and say so on stderr; returns ``folder``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        log.warning("perf-callbacks: could not create %s", folder, exc_info=True)
        return folder
    quiet(lambda: _write_faulthandler(folder / "stacks.txt"))
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
    quiet(lambda: _write_json(folder / "hang.json", data))
    print(
        f"perf-callbacks: rank {facts.rank}: no step completed for {facts.waited_s:.0f} s (step {facts.step}, "
        f"phase {facts.phase}); every thread's stack and the last collectives are in {folder}; it is not stopped: "
        f"`perf-callbacks report {folder.parent}` says which rank is where",
        file=sys.stderr,
        flush=True,
    )
    for name, file in _FLIGHT_RECORDERS:
        if quiet(functools.partial(_write_flight_recorder, name, folder / file)):
            data["flight_recorder"].append(file)
            quiet(lambda: _write_json(folder / "hang.json", data))
    return folder


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
    with open(path, "w", encoding="utf-8") as f:
        faulthandler.dump_traceback(f, all_threads=True)


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
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)

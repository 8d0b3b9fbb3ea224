"""Where a trace's sidecar summary lives, and reading it back only while it still matches its trace."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from perf_callbacks._errors import describe_error
from perf_callbacks._input_files import read_json
from perf_callbacks.analysis.trace.loader import open_trace, rank_from_name

FORMAT = "perf-callbacks-sidecar/7"
"""Version 2: validation and checkpoint time is set aside; version 3: collective and transfer bandwidth, launch latency,
memory by operator and the op table; version 4: the HTML report's timeline strip, backlog from the delayed work's
launch, device time charged to the op that encloses the launch; version 5: launch latency from the end of the launch
call (as HTA), with the share of kernels queued behind earlier work, and what is held at the memory peak; version 6:
older torch's collectives sized by their ``nccl:`` annotation, host copies of unknown memory, MTIA DMA and event
waits, the window's load and the loader block; version 7: the name of the longest device work in each run of the
timeline strip (``strip_names``, the HTML timeline's hover text), each recommendation an object with its cause,
estimated gain and the basis of the gain, the peak by category, the roofline rows and the precision hint. A sidecar
of an older version is ignored (the trace is parsed)."""
CANNOT_WRITE = 3
"""The analysis process' exit status when the sidecar itself could not be written (its last stderr line says why)."""
STDERR_PREFIX = "perf-callbacks sidecar: "
_DIST_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^}]*?"rank"\s*:\s*(\d+)')
_WINDOW = re.compile(r"window-(\d+)-(\d+)")


def sidecar_path(trace: Path) -> Path:
    """``rank{R}.summary.json`` next to ``trace``.

    R comes from the file name (``rank3...``), else from the trace's ``distributedInfo``; without either, the
    sidecar is named after the trace (``<name>.summary.json``).

    Example:
        >>> sidecar_path(Path("w/rank3.pt.trace.json.gz")).as_posix()
        'w/rank3.summary.json'
    """
    rank = rank_from_name(trace)
    if rank is None:
        rank = _rank_from_head(trace)
    stem = f"rank{rank}" if rank is not None else trace.name
    return trace.with_name(f"{stem}.summary.json")


def read_sidecar(trace: Path) -> dict[str, Any] | None:
    """The sidecar of ``trace``, or None when it is absent, unreadable, or written for another version of the file.

    A sidecar matches when its ``trace`` (file name) and ``trace_bytes`` (size) are those of the file now, and it
    does not contradict where the trace lies: the window its ``meta`` names is the ``window-AAAAAA-BBBBBB`` folder's,
    the rank its ``meta`` and its result name is the file name's (``rank3...``), and its result holds no more steps
    than the folder and its ``meta`` say the window recorded. The trace itself is not read (a remote report has not
    downloaded it).
    """
    return load_sidecar(trace)[0]


def load_sidecar(trace: Path) -> tuple[dict[str, Any] | None, str | None]:
    """:func:`read_sidecar`, with why a sidecar that is there could not be read (None when it was, or is absent).

    A sidecar that is not a regular file, larger than ``JSON_MAX_BYTES``, invalid or nested too deeply is set aside
    with that reason; a stale one (another format, name or size) or one that contradicts its trace's place is set
    aside without one, as it is no damage.
    """
    path = sidecar_path(trace)
    try:
        data = read_json(path)
        size = trace.stat().st_size
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as err:
        why = describe_error(err) if isinstance(err, OSError) and err.errno else str(err)
        return None, f"{path.name} set aside ({why.replace(f'{path}: ', '')}); its trace was parsed"
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None, None
    if data.get("trace") != trace.name or data.get("trace_bytes") != size or contradicts(data, trace):
        return None, None
    return data, None


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a hidden temporary name in the same folder, then rename it to ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def contradicts(data: dict[str, Any], trace: Path) -> bool:
    """The sidecar names another window, another rank, or more steps than its trace's place allows."""
    meta, rank = data.get("meta"), data.get("rank")
    meta = meta if isinstance(meta, dict) else {}
    rank = rank if isinstance(rank, dict) else {}
    folder = _WINDOW.fullmatch(trace.parent.name)
    window = [int(folder.group(1)), int(folder.group(2))] if folder else None
    if window is not None and "window" in meta and meta["window"] != window:
        return True
    named = rank_from_name(trace)
    claims = [meta.get("rank"), rank.get("rank") if rank.get("rank_source") == "file name" else None]
    if named is not None and any(c is not None and c != named for c in claims):
        return True
    steps = rank.get("steps")
    limits = [window[1] - window[0] + 1 if window else None,
              len(meta["steps"]) if isinstance(meta.get("steps"), list) else None]
    return isinstance(steps, list) and any(n is not None and len(steps) > n for n in limits)


def _rank_from_head(trace: Path) -> int | None:
    try:
        with open_trace(trace) as f:
            head = f.read(64 << 10)
    except (OSError, EOFError, ValueError):
        return None
    match = _DIST_RANK.search(head)
    return int(match.group(1)) if match else None

"""Where traces go and how they are written.

Layout, one folder per window and one file per global rank (HTA reads one folder as one trace set; the TensorBoard
profiler plugin reads ``<worker>.pt.trace.json.gz``)::

    <output_dir>/<run>/window-000012-000014/rank0.pt.trace.json.gz
                                           /rank1.pt.trace.json.gz
                                           /summary.txt            (rank 0)

``<run>`` is agreed by all ranks when training starts (a timestamp plus a random suffix), so ranks, nodes, restarts
and repeated ``fit`` calls never write over each other. Every file is written to a hidden ``.partial`` name and then
renamed, so a crash or a full disk never leaves a truncated ``.json.gz`` for HTA or the report to trip on.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

TRACE_SUFFIX = ".pt.trace.json.gz"
_CHUNK = 1 << 20


def new_run_name() -> str:
    """A name unique to this training run: ``YYYYmmdd-HHMMSS-xxxxxx``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


class TraceLayout:
    """Paths of one run's windows and per-rank files.

    Args:
        output_dir: the configured ``output_dir``.
        run_name: shared by all ranks of this run.
    """

    def __init__(self, output_dir: str | os.PathLike[str], run_name: str) -> None:
        self.run_dir = Path(output_dir) / run_name

    def window_dir(self, first: int, last: int) -> Path:
        """The folder of the window covering optimizer steps ``first``..``last``."""
        return self.run_dir / f"window-{first:06d}-{last:06d}"

    @staticmethod
    def trace_path(window_dir: Path, rank: int) -> Path:
        """The trace file of global ``rank`` inside ``window_dir``."""
        return window_dir / f"rank{rank}{TRACE_SUFFIX}"

    @staticmethod
    def raw_path(window_dir: Path, rank: int) -> Path:
        """A hidden scratch file for the profiler's uncompressed export."""
        return window_dir / f".rank{rank}.raw.partial"


def compress_trace(raw: Path, dest: Path, distributed_info: dict[str, Any] | None = None, level: int = 4) -> Path:
    """Gzip ``raw`` into ``dest`` atomically, adding ``distributedInfo`` when the trace lacks it; never overwrites.

    Returns the path actually written (``dest``, or a ``-N`` variant if ``dest`` already exists).
    """
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        with raw.open("rb") as src, gzip.open(partial, "wb", compresslevel=level) as out:
            head = src.read(_CHUNK)
            if distributed_info is not None and b'"distributedInfo"' not in head:
                head = _inject_top_level(head, "distributedInfo", distributed_info)
            out.write(head)
            shutil.copyfileobj(src, out, _CHUNK)
        return publish(partial, dest)
    finally:
        partial.unlink(missing_ok=True)


def write_text(dest: Path, text: str) -> Path:
    """Write a small text file atomically (temp name, then rename); never overwrites."""
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        partial.write_text(text)
        return publish(partial, dest)
    finally:
        partial.unlink(missing_ok=True)


def publish(partial: Path, dest: Path) -> Path:
    """Hard-link ``partial`` to ``dest`` (or ``name-1``, ``name-2``...) so an existing file is never replaced."""
    stem, suffix = _split_name(dest.name)
    candidate, n = dest, 0
    while True:
        try:
            os.link(partial, candidate)
            return candidate
        except FileExistsError:
            n += 1
            candidate = dest.with_name(f"{stem}-{n}{suffix}")
        except OSError:  # file systems without hard links: rename (no overwrite check possible atomically)
            if candidate.exists():
                n += 1
                candidate = dest.with_name(f"{stem}-{n}{suffix}")
                continue
            os.replace(partial, candidate)
            return candidate


def _split_name(name: str) -> tuple[str, str]:
    for suffix in (TRACE_SUFFIX, ".txt", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def _inject_top_level(head: bytes, key: str, value: Any) -> bytes:
    brace = head.find(b"{")
    if brace < 0:
        return head
    entry = json.dumps({key: value})[1:-1].encode() + b","
    return head[: brace + 1] + b"\n  " + entry + head[brace + 1 :]

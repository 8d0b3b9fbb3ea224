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
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from perf_callbacks.core.files.outputs import make_dirs, remove_empty

TRACE_SUFFIX = ".pt.trace.json.gz"
_CHUNK = 1 << 20
_PROBE = 1 << 16  # bytes appended to Kineto's scratch file to learn why its export failed


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


class TraceTooLargeError(Exception):
    """The exported trace is above ``max_trace_mb``; it was removed."""

    def __init__(self, size_mb: float) -> None:
        super().__init__(size_text(size_mb))
        self.size_mb = size_mb


def size_text(size_mb: float) -> str:
    """A file size with the precision that tells it from a small ``max_trace_mb``: bytes, KB, then MB.

    Example:
        >>> size_text(0.0123), size_text(0.0004), size_text(1.500001), size_text(812.4)
        ('12.3 KB (0.0123 MB)', '400 bytes (0.0004 MB)', '1.5 MB', '812 MB')
    """
    size = size_mb * 1e6
    if size < 1e3:
        return f"{size:.0f} bytes ({size_mb:.3g} MB)"
    if size < 1e6:
        return f"{size / 1e3:.1f} KB ({size_mb:.3g} MB)"
    return f"{size_mb:.1f} MB" if size_mb < 100 else f"{size_mb:.0f} MB"


def export_raw(export: Callable[[Path], None], window_dir: Path, rank: int, max_trace_mb: float,
               tidy: bool = False) -> Path:
    """Have the stopped profiler write its uncompressed trace to a hidden scratch file in ``window_dir``.

    On any failure nothing is left behind: the scratch file and Kineto's own ``.tmp`` are removed, and with ``tidy``
    (this process is the only writer of the run folder) so are the folders this call created.

    Raises:
        TraceTooLargeError: the file is above ``max_trace_mb`` (it is removed).
        OSError: the export could not be written, with the real cause (Kineto only logs ``Failed to write to log
            file!`` and returns; see :func:`_why_nothing_was_written`).
    """
    created = make_dirs(window_dir)
    raw = TraceLayout.raw_path(window_dir, rank)
    scratch = raw.with_name(raw.name + ".tmp")  # where Kineto writes before renaming to ``raw``
    try:
        export(raw)
        if not raw.exists():
            raise _why_nothing_was_written(raw, scratch)
        size_mb = raw.stat().st_size / 1e6
        if size_mb > max_trace_mb:
            raise TraceTooLargeError(size_mb)
    except BaseException:
        raw.unlink(missing_ok=True)
        scratch.unlink(missing_ok=True)
        if tidy:
            remove_empty(created)
        raise
    return raw


def _why_nothing_was_written(raw: Path, scratch: Path) -> Exception:
    """The profiler's export returned without writing ``raw``: append to its scratch file to get the errno it had.

    Kineto writes to ``<raw>.tmp``, logs ``Failed to write to log file!`` when that fails (a full disk) and returns
    without raising; its scratch file (up to the whole disk) is still there, so a write of our own meets the same
    condition and raises the real error (``ENOSPC``, ``EDQUOT``, ``EIO``, ``ENOENT`` for a deleted folder...).
    """
    try:
        with open(scratch, "ab") as probe:
            probe.write(bytes(_PROBE))
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as err:
        return OSError(err.errno, err.strerror, str(raw))
    return RuntimeError(f"the profiler's export wrote no file: {raw} (Kineto: 'Failed to write to log file!')")


def compress_trace(raw: Path, dest: Path, level: int = 4) -> Path:
    """Gzip ``raw`` into ``dest`` atomically (hidden ``.partial`` name, then a link); never overwrites.

    Returns the path actually written (``dest``, or a ``-N`` variant if ``dest`` already exists). On any failure
    (a full disk, say) the ``.partial`` file is removed and the error propagates.
    """
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        with raw.open("rb") as src, gzip.open(partial, "wb", compresslevel=level) as out:
            shutil.copyfileobj(src, out, _CHUNK)
        return publish(partial, dest)
    except OSError as err:
        if err.filename is None:  # gzip's write names no file: name the trace being written
            err.filename = str(dest)
        raise
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

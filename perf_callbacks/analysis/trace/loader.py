r"""Finding and reading Kineto traces: one file, a window folder of per-rank traces, or a whole ``output_dir``.

Traces are parsed in chunks so that memory stays a small multiple of the file: Kineto writes one event per block,
separated by ``"\\n  },\\n  {"``, so the ``traceEvents`` array is cut at those seams and each slice is parsed on its
own (with orjson when it is importable). Any file that does not follow that layout is parsed whole.

The reading is linear in the file and bounded: no more than :func:`max_trace_bytes` of JSON is read from one file
once decompressed (``--max-trace-mb``, ``$PERF_CALLBACKS_MAX_TRACE_MB``, default :data:`MAX_TRACE_MB`), so a small
``.gz`` that inflates to gigabytes (of whitespace, say) ends in :class:`TraceTooLarge` after that much, and only regular
files are opened (:mod:`~perf_callbacks._input_files`).
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from perf_callbacks._input_files import NotRegularFile, open_regular

try:
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
    PARSER = "orjson"
except ImportError:  # pragma: no cover - exercised only without orjson
    _loads = json.loads
    PARSER = "json"

MAX_TRACE_MB = 2048
"""Default bound on one trace's JSON once decompressed, in MB (``$PERF_CALLBACKS_MAX_TRACE_MB``; 0: no bound)."""
MAX_TRACE_ENV = "PERF_CALLBACKS_MAX_TRACE_MB"


class EventSink(Protocol):
    """Receives parsed slices of ``traceEvents``; ``reset`` drops them when the file must be parsed again whole."""

    def add(self, events: list[dict[str, Any]]) -> None:
        """Take one slice of events."""

    def reset(self) -> None:
        """Forgets every slice taken so far."""

_CHUNK = 4 << 20
_SEAM = b"\n  },\n  {"
_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_END = b"\n  ]"
_RANK = re.compile(r"rank[_-]?(\d+)")
_HEAD = 64 << 10
_LIST_HEAD = re.compile(rb'^\s*\[\s*(\]|\{)')
TRACE_SUFFIXES = (".json", ".json.gz")
_READ_ERRORS = (OSError, EOFError, ValueError, TypeError, zlib.error, RecursionError)


class TraceError(ValueError):
    """A file that cannot be read as a trace; the message names the file and says why."""


class TraceTooLarge(TraceError):
    """A trace holds more JSON, once decompressed, than :func:`max_trace_bytes`; the rest of it is not read."""


def max_trace_bytes() -> int | None:
    """The bound on one trace's JSON in bytes: ``$PERF_CALLBACKS_MAX_TRACE_MB`` (MB), else :data:`MAX_TRACE_MB`.

    None when the variable is 0 (no bound).

    Raises:
        ValueError: the variable is not a number >= 0.
    """
    text = os.environ.get(MAX_TRACE_ENV, "").strip()
    try:
        mb = float(text) if text else float(MAX_TRACE_MB)
    except ValueError:
        mb = -1.0
    if not 0 <= mb < float("inf"):
        raise ValueError(f"{MAX_TRACE_ENV} must be a number of MB >= 0, got {text!r}")
    return int(mb * (1 << 20)) or None


def is_candidate(path: Path) -> bool:
    """Whether ``path`` has a trace's file name ending (``.json`` or ``.json.gz``) and is not hidden or a sidecar."""
    name = path.name
    return name.endswith(TRACE_SUFFIXES) and not name.startswith(".") and not name.endswith(".summary.json")


def sniff(path: Path) -> str | None:
    """Return None when the start of ``path`` looks like a Kineto trace, else why it does not.

    A trace is a JSON object whose first 64 KiB hold ``"traceEvents"`` (or ``"schemaVersion"``), or a JSON list
    of event objects.
    """
    try:
        with open_trace(path) as f:
            head = f.read(_HEAD)
    except _READ_ERRORS as err:
        return f"unreadable ({_reason(err)})"
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        if b'"traceEvents"' in head or b'"schemaVersion"' in head:
            return None
        return "a JSON object without traceEvents"
    if _LIST_HEAD.match(head) and (b'"ts"' in head or b'"ph"' in head or b"{" not in head):
        return None
    return "not a JSON trace" if stripped else "empty file"


def is_tensorboard_events(path: Path) -> bool:
    """Whether ``path`` is a TensorBoard event file (``events.out.tfevents.*``, or a TFRecord of ``brain.Event``)."""
    if path.name.startswith("events.out.tfevents"):
        return True
    try:
        with open_regular(path) as f:
            head = f.read(64)
    except OSError:
        return False
    return b"brain.Event" in head


def is_trace_file(path: Path) -> bool:
    """Whether ``path`` is a Kineto trace: a ``.json``/``.json.gz`` file whose content starts like one."""
    return is_candidate(path) and sniff(path) is None


def rank_from_name(path: Path) -> int | None:
    """Return the rank written in a file name such as ``rank3.pt.trace.json.gz`` or ``rank-3.json``, or None."""
    match = _RANK.search(path.name)
    return int(match.group(1)) if match else None


def read_trace(path: Path, sink: EventSink) -> dict[str, Any]:
    """Streams the events of one trace into ``sink`` (a list per chunk) and returns the top-level metadata.

    Args:
        path: a ``.json`` or ``.json.gz`` Kineto trace.
        sink: takes each parsed slice of ``traceEvents``.

    Returns:
        Every top-level key except ``traceEvents`` (empty for a trace whose top level is a list of events).

    Raises:
        TraceError: when the file cannot be read or parsed (truncated gzip, invalid JSON, wrong top level).
    """
    try:
        with paused_gc():
            return _read(path, sink)
    except TraceError:
        raise
    except _READ_ERRORS as err:
        raise TraceError(f"{path}: {_reason(err)}") from None


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a trace is read and analysed, then restore it.

    The events and the tuples made of them hold no cycles, and they are many: every full collection on the way walks
    all of them again (23 on the 65 MB ``input_bound`` trace, half the time of its reading). Reference counting
    still frees everything as usual; only cycles wait until the collector runs again.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read(path: Path, sink: EventSink) -> dict[str, Any]:
    limit = max_trace_bytes()
    with open_trace(path) as f:
        meta = _read_streamed(_Limited(f, limit, path), sink)
    if meta is not None:
        return meta
    sink.reset()
    with open_trace(path) as f:
        text = _Limited(f, limit, path).read_all()
    try:
        doc = _loads(text)
    except ValueError:  # orjson refuses NaN and Infinity, which Python's json (and some writers) accept
        doc = json.loads(text)
    if isinstance(doc, list):
        sink.add(doc)
        return {}
    if not isinstance(doc, dict):
        raise TraceError(f"{path}: top level is a JSON {type(doc).__name__}, not an object or a list of events")
    events = doc.pop("traceEvents", [])
    if not isinstance(events, list):
        raise TraceError(f"{path}: traceEvents is a {type(events).__name__}, not a list")
    sink.add(events)
    return dict(doc)


def _reason(err: BaseException) -> str:
    if isinstance(err, NotRegularFile):
        return str(err).rsplit(": ", 1)[-1]
    if isinstance(err, RecursionError):
        return "invalid JSON (nested too deeply to parse)"
    if isinstance(err, EOFError):
        return "truncated file (the compressed stream ends early)"
    if isinstance(err, gzip.BadGzipFile):
        return f"not a valid gzip file ({err})"
    if isinstance(err, zlib.error):
        return f"corrupt gzip data ({err})"
    if isinstance(err, UnicodeDecodeError):
        return "binary content, not JSON text"
    if isinstance(err, ValueError):
        return f"invalid JSON ({str(err).splitlines()[0][:120]})"
    return f"{type(err).__name__}: {err}"


def open_trace(path: Path) -> BinaryIO:
    """Open a ``.json`` or ``.json.gz`` regular file for reading bytes (``OSError`` for a FIFO, a device...)."""
    raw = open_regular(path)
    if not path.name.endswith(".gz"):
        return raw
    gz = gzip.GzipFile(fileobj=raw, mode="rb")
    gz.myfileobj = raw  # type: ignore[assignment] # closed with it, as when GzipFile opens the file itself
    return gz  # type: ignore[return-value]


class _Limited:
    """Reads of a trace that stop with :class:`TraceTooLarge` past ``limit`` bytes (None: no limit)."""

    def __init__(self, f: BinaryIO, limit: int | None, path: Path) -> None:
        self._f, self._limit, self._path, self._read = f, limit, path, 0

    def read(self, size: int) -> bytes:
        block = self._f.read(size)
        self._read += len(block)
        if self._limit is not None and self._read > self._limit:
            raise TraceTooLarge(f"{self._path}: more than {self._limit / (1 << 20):g} MB of JSON once decompressed, "
                                f"not read (the limit: --max-trace-mb or ${MAX_TRACE_ENV}; 0: no limit)")
        return block

    def read_all(self) -> bytes:
        return b"".join(_blocks(self))


def _blocks(f: BinaryIO | _Limited) -> Iterator[bytes]:
    while block := f.read(_CHUNK):
        yield block


def _read_streamed(f: _Limited, sink: EventSink) -> dict[str, Any] | None:
    """Parse slice by slice; returns None (and has sent nothing) when the layout is not Kineto's.

    The blocks read since the last seam wait in a list and are joined once a new block holds a seam, so that
    the time is linear in the file however far apart the seams are.
    """
    blocks = _blocks(f)
    buf = b""
    head = None
    for block in blocks:
        buf += block
        head = _START.search(buf)
        if head or len(buf) > 1 << 20:
            break
    if head is None:
        return None
    header, pending = buf[: head.end()], [buf[head.end() :]]
    try:
        for block in blocks:
            pending.append(block)
            if _SEAM not in pending[-2][-len(_SEAM):] + block:
                continue
            buf = b"".join(pending)
            cut = buf.rfind(_SEAM)
            if cut > 0:
                sink.add(_loads(b"[" + buf[: cut + 4] + b"]"))
                buf = buf[cut + 5 :]
            pending = [buf]
        buf = b"".join(pending)
        end = buf.rfind(_END)
        events = _loads(b"[" + buf[:end] + b"]") if end >= 0 else None
        meta = _loads(header + b"]" + buf[end + len(_END) :]) if end >= 0 else None
    except TraceTooLarge:
        raise
    except ValueError:
        return None
    if events is None or not isinstance(meta, dict):
        return None
    sink.add(events)
    meta.pop("traceEvents", None)
    return dict(meta)

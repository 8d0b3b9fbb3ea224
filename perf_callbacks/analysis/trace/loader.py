r"""Finding and reading Kineto traces: one file, a window folder of per-rank traces, or a whole ``output_dir``.

Traces are parsed in chunks so that memory stays a small multiple of the file: Kineto writes one event per block,
separated by ``"\\n  },\\n  {"``, so the ``traceEvents`` array is cut at those seams and each slice is parsed on its
own (with orjson when it is importable). Any file that does not follow that layout is parsed whole.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol

try:
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
    PARSER = "orjson"
except ImportError:  # pragma: no cover - exercised only without orjson
    _loads = json.loads
    PARSER = "json"



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
        with path.open("rb") as f:
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
        return _read(path, sink)
    except TraceError:
        raise
    except _READ_ERRORS as err:
        raise TraceError(f"{path}: {_reason(err)}") from None


def _read(path: Path, sink: EventSink) -> dict[str, Any]:
    with open_trace(path) as f:
        meta = _read_streamed(f, sink)
    if meta is not None:
        return meta
    sink.reset()
    with open_trace(path) as f:
        text = f.read()
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
    """Open a ``.json`` or ``.json.gz`` file for reading bytes."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return path.open("rb")


def _blocks(f: BinaryIO) -> Iterator[bytes]:
    while block := f.read(_CHUNK):
        yield block


def _read_streamed(f: BinaryIO, sink: EventSink) -> dict[str, Any] | None:
    """Parse slice by slice; returns None (and has sent nothing) when the layout is not Kineto's."""
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
    header, buf = buf[: head.end()], buf[head.end() :]
    try:
        for block in blocks:
            buf += block
            cut = buf.rfind(_SEAM)
            if cut > 0:
                sink.add(_loads(b"[" + buf[: cut + 4] + b"]"))
                buf = buf[cut + 5 :]
        end = buf.rfind(_END)
        events = _loads(b"[" + buf[:end] + b"]") if end >= 0 else None
        meta = _loads(header + b"]" + buf[end + len(_END) :]) if end >= 0 else None
    except ValueError:
        return None
    if events is None or not isinstance(meta, dict):
        return None
    sink.add(events)
    meta.pop("traceEvents", None)
    return dict(meta)

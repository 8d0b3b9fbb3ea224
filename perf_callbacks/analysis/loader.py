r"""Finding and reading Kineto traces: one file, a window folder of per-rank traces, or a whole ``output_dir``.

Traces are parsed in chunks so that memory stays a small multiple of the file: Kineto writes one event per block,
separated by ``"\\n  },\\n  {"``, so the ``traceEvents`` array is cut at those seams and each slice is parsed on its
own (with orjson when it is importable). Any file that does not follow that layout is parsed whole.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Window:
    """One profiling window: a folder (or a single file) holding one trace per rank.

    Args:
        path: the window folder, or the trace file itself.
        files: the trace files, one per rank.
    """

    path: Path
    files: list[Path] = field(default_factory=list)


def is_trace_file(path: Path) -> bool:
    """Whether ``path`` looks like a Kineto trace written by torch.profiler or by this package."""
    name = path.name
    if not (name.endswith(".json") or name.endswith(".json.gz")):
        return False
    return ".trace." in name or name.startswith("rank") or "pt.trace" in name


def find_windows(path: str | Path) -> list[Window]:
    """List the windows under ``path``, most recent first (newest trace file modification time, then name).

    Args:
        path: a trace file, a window folder of per-rank traces, or an ``output_dir`` holding window folders.

    Raises:
        FileNotFoundError: when ``path`` does not exist or holds no trace.
    """
    root = Path(path)
    if root.is_file():
        return [Window(root, [root])]
    if not root.is_dir():
        raise FileNotFoundError(f"no trace file or folder at {root}")
    groups: dict[Path, list[Path]] = {}
    for f in sorted(root.rglob("*.json*")):
        if f.is_file() and is_trace_file(f):
            groups.setdefault(f.parent, []).append(f)
    if not groups:
        raise FileNotFoundError(f"no *.json or *.json.gz trace under {root}")
    windows = [Window(folder, files) for folder, files in groups.items()]
    return sorted(windows, key=lambda w: (max(f.stat().st_mtime for f in w.files), str(w.path)), reverse=True)


def rank_from_name(path: Path) -> int | None:
    """Return the rank written in a file name such as ``rank3.pt.trace.json.gz``, or None."""
    match = _RANK.search(path.name)
    return int(match.group(1)) if match else None


def read_trace(path: Path, sink: EventSink) -> dict[str, Any]:
    """Streams the events of one trace into ``sink`` (a list per chunk) and returns the top-level metadata.

    Args:
        path: a ``.json`` or ``.json.gz`` Kineto trace.
        sink: takes each parsed slice of ``traceEvents``.

    Returns:
        Every top-level key except ``traceEvents``.
    """
    with _open(path) as f:
        meta = _read_streamed(f, sink)
    if meta is not None:
        return meta
    sink.reset()
    with _open(path) as f:
        doc = _loads(f.read())
    sink.add(doc.pop("traceEvents", []))
    return dict(doc)


def _open(path: Path) -> BinaryIO:
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

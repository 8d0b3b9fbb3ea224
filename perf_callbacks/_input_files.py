"""Opening a file that ``report`` or ``diff`` reads, whatever lies at its path: regular files only, bounded reads.

A run folder can hold anything: a FIFO named ``hang.json`` (whose ``open`` waits for a writer forever), a symlink to
``/dev/zero`` named like a sidecar (whose read never ends), a sidecar of 100,000 nested brackets (which overflows a
recursive parser). So every file is opened without blocking (``O_NONBLOCK``: a FIFO opens at once) and checked with
``fstat`` on the open descriptor (no race with a rename) before a byte is read: anything but a regular file raises
:class:`NotRegularFile`, an ``OSError`` that callers already treat as "unreadable". Small JSON files (sidecars,
``hang.json``, flight-recorder dumps) are read up to :data:`JSON_MAX_BYTES` and nested :data:`JSON_MAX_DEPTH` levels
at most; past either, ``ValueError`` says so.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> os.mkfifo(os.path.join(folder, "hang.json"))
    >>> try:
    ...     open_regular(os.path.join(folder, "hang.json"))
    ... except NotRegularFile as err:
    ...     print(str(err).split(": ")[1])
    not a regular file (a FIFO), not read
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, BinaryIO

try:
    import orjson

    _ORJSON = True
except ImportError:  # pragma: no cover - exercised only without orjson
    _ORJSON = False

JSON_MAX_BYTES = 64 << 20
"""The largest sidecar, ``hang.json`` or flight-recorder dump read (ours are kilobytes to a few megabytes)."""
JSON_MAX_DEPTH = 64
"""The deepest nesting of arrays and objects accepted in those files (ours nest 6 levels at most)."""
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


class NotRegularFile(OSError):
    """The path is a FIFO, a device, a socket or a folder: it is not read."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for reading bytes, without blocking, only when it is a regular file (symlinks followed).

    Raises:
        NotRegularFile: a FIFO, a device, a socket or a folder (the message names the kind and the path).
        OSError: the path cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "not a file")
            raise NotRegularFile(f"{os.fspath(path)}: not a regular file ({kind}), not read")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_json(path: str | os.PathLike[str], max_bytes: int = JSON_MAX_BYTES) -> Any:
    """The JSON value in the regular file ``path``, read and nested within bounds.

    Raises:
        OSError: not a regular file, or it cannot be read.
        ValueError: more than ``max_bytes``, invalid JSON, or nested deeper than :data:`JSON_MAX_DEPTH`.
    """
    with open_regular(path) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{os.fspath(path)}: larger than {max_bytes >> 20} MB, not read")
    return loads_bounded(data, os.fspath(path))


def loads_bounded(data: bytes | str, name: str = "JSON") -> Any:
    """Parse ``data``; ``ValueError`` when it is invalid or nested deeper than :data:`JSON_MAX_DEPTH`.

    Example:
        >>> loads_bounded(b"[" * 100000 + b"]" * 100000)
        Traceback (most recent call last):
        ...
        ValueError: JSON: nested deeper than 64 levels, not read
    """
    try:
        value = _parse(data)
    except RecursionError:
        value, too_deep = None, True
    except ValueError as err:
        if "depth" not in str(err) and "recursion" not in str(err):
            raise ValueError(f"{name}: invalid JSON ({str(err).splitlines()[0][:120]})") from None
        value, too_deep = None, True
    else:
        too_deep = _depth_over(value, JSON_MAX_DEPTH)
    if too_deep:
        raise ValueError(f"{name}: nested deeper than {JSON_MAX_DEPTH} levels, not read")
    return value


def _parse(data: bytes | str) -> Any:
    if not _ORJSON:  # pragma: no cover - exercised only without orjson
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        if "depth" in str(err):
            raise
        return json.loads(data)  # orjson refuses NaN and Infinity, which Python's json accepts


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` levels (walked without recursion)."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        todo.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False

"""Reading small control files (a capture request, a live run's marker) in bounded time and memory.

A file in a run's folder is whatever someone put there: a FIFO (whose reader waits for a writer forever), a device
(``/dev/zero`` never ends), a symlink to either, a huge file. Only a regular file that is not a symlink and holds at
most :data:`MAX_REQUEST_BYTES` is read: :func:`read_small` checks with ``lstat`` first, opens with ``O_NONBLOCK`` and
``O_NOFOLLOW`` (a file swapped for a FIFO or a symlink between the check and the open cannot block or redirect it),
checks the opened file again and reads at most the cap and one byte. Anything else is ignored with one debug line.

On object storage (:func:`read_remote_small`) the object's size is asked first and at most the cap is read, each call
bounded by ``timeout_s`` (fsspec cancels the request of an asynchronous back end such as s3fs; botocore's own
retries on a silent endpoint would otherwise take minutes).

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "capture"), "w") as f:
    ...     _ = f.write('{"id": "a1", "steps": 2}')
    >>> read_small(os.path.join(folder, "capture"))
    b'{"id": "a1", "steps": 2}'
    >>> os.mkfifo(os.path.join(folder, "fifo"))
    >>> read_small(os.path.join(folder, "fifo")) is None  # never opened
    True
"""

from __future__ import annotations

import json
import logging
import os
import stat
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
MAX_REQUEST_BYTES = 64 * 1024
"""The largest control file read: a request is ~50 bytes of JSON, a marker ~200; a larger file is not ours."""
REMOTE_CALL_S = 5.0
"""The longest one request to object storage may take from the request thread (a look, the marker)."""
REQUEST_FILE = "capture"
"""The request file's name, in a run's ``output_dir`` or its run folder: JSON ``{"id": "...", "steps": N}``."""
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def write_request(
    run_dir: str | os.PathLike[str], steps: int | None = None, storage_options: dict[str, Any] | None = None,
    fs: Any = None,
) -> str:
    """Write a new request into ``run_dir`` (a folder, an fsspec URL, or a path on ``fs``) atomically; its id."""
    request_id = uuid.uuid4().hex[:12]
    body = json.dumps({"id": request_id, "steps": steps}).encode()
    target = str(run_dir)
    if fs is None and "://" in target and not target.startswith("file://"):
        import fsspec

        fs, target = fsspec.core.url_to_fs(target, **(storage_options or {}))
    if fs is not None:
        fs.pipe_file(f"{str(target).rstrip('/')}/{REQUEST_FILE}", body)
        return request_id
    folder = Path(target.removeprefix("file://"))
    tmp = folder / f".{REQUEST_FILE}.{request_id}.tmp"
    tmp.write_bytes(body)
    os.replace(tmp, folder / REQUEST_FILE)
    return request_id


def read_request(path: Path) -> tuple[str, int | None] | None:
    """``(id, steps)`` of the request file at ``path``; None when there is none (or it is not one)."""
    return parse_request(read_small(path))


def parse_request(body: bytes | None) -> tuple[str, int | None] | None:
    """``(id, steps)`` from a request file's bytes; None when they are not a request (or there are none)."""
    if body is None:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        return None
    steps = data.get("steps")
    return data["id"], steps if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1 else None


def read_small(path: str | os.PathLike[str], cap: int = MAX_REQUEST_BYTES) -> bytes | None:
    """The bytes of the regular file at ``path`` (not a symlink, at most ``cap`` bytes); None otherwise or if absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not _acceptable(path, st, cap):
        return None
    try:
        fd = os.open(path, _FLAGS)
    except OSError:  # gone, or a symlink swapped in since (O_NOFOLLOW)
        return None
    try:
        if not _acceptable(path, os.fstat(fd), cap):  # swapped for something else since the lstat
            return None
        return _read_at_most(fd, path, cap)
    finally:
        os.close(fd)


def read_remote_small(fs: Any, path: str, cap: int = MAX_REQUEST_BYTES,
                      timeout_s: float | None = REMOTE_CALL_S) -> bytes | None:
    """The bytes of the object ``path`` on the fsspec file system ``fs`` if it is a file of at most ``cap`` bytes.

    Raises:
        Exception: the storage's error (a timeout, credentials): the caller decides.
    """
    try:
        info = fs.info(path, **timeout_kw(fs, timeout_s))
    except FileNotFoundError:
        return None
    size = info.get("size")
    if info.get("type") != "file" or not isinstance(size, int) or size > cap:
        log.debug("perf-callbacks: %s is not a small file (%s, %s bytes): ignored", path, info.get("type"), size)
        return None
    body = bytes(fs.cat_file(path, start=0, end=cap + 1, **timeout_kw(fs, timeout_s)))
    return None if len(body) > cap else body


def timeout_kw(fs: Any, timeout_s: float | None) -> dict[str, float]:
    """``{"timeout": timeout_s}`` for an fsspec file system that takes it (asynchronous back ends), else ``{}``."""
    from fsspec.asyn import AsyncFileSystem

    return {"timeout": timeout_s} if timeout_s and isinstance(fs, AsyncFileSystem) and not fs.asynchronous else {}


def _acceptable(path: str | os.PathLike[str], st: os.stat_result, cap: int) -> bool:
    if not stat.S_ISREG(st.st_mode):
        log.debug("perf-callbacks: %s is not a regular file (mode %o): ignored", path, st.st_mode)
        return False
    if st.st_size > cap:
        log.debug("perf-callbacks: %s holds %d bytes, more than %d: ignored", path, st.st_size, cap)
        return False
    return True


def _read_at_most(fd: int, path: str | os.PathLike[str], cap: int) -> bytes | None:
    chunks: list[bytes] = []
    left = cap + 1
    while left > 0:
        try:
            chunk = os.read(fd, left)
        except BlockingIOError:
            return None
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    if left <= 0:
        log.debug("perf-callbacks: %s grew past %d bytes: ignored", path, cap)
        return None
    return b"".join(chunks)


class LazyFs:
    """The fsspec file system of ``url``, made at its first use (from the request thread, never at start).

    Args:
        url: a remote folder.
        storage_options: for ``fsspec.url_to_fs``.
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None) -> None:
        self.url, self.options = url, dict(storage_options or {})
        self._made: tuple[Any, str] | None = None

    def get(self) -> tuple[Any, str]:
        """``(fs, path)``: the file system and the folder's path on it."""
        if self._made is None:
            import fsspec

            fs, path = fsspec.core.url_to_fs(self.url, **self.options)
            self._made = fs, str(path).rstrip("/")
        return self._made

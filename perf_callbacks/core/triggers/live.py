"""The live-run marker: how ``perf-callbacks capture`` tells a live run's folder from any other folder.

Each rank that watches for request files (``capture_poll_s`` > 0) keeps a small JSON file in its ``output_dir``
(local, or the remote URL)::

    <output_dir>/.perf-callbacks-live-<run>-rank<R>.json   {"run", "rank", "pid", "host", "t", "poll_s", "refresh_s"}

Its request thread writes it after its first look (so that every request written once the marker is there is a new
one), writes it again every :data:`REFRESH_S` seconds (``t``: the time of writing) and removes it when the engine
closes. A marker is live while it is fresh (``t`` within :data:`STALE_REFRESHES` refreshes and one poll of now) and,
on the machine that wrote it, while its process runs: a run killed outright leaves one that goes stale.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> out = Path(tempfile.mkdtemp())
    >>> marker = LiveMarker("20260101-000000-abcdef", rank=0, poll_s=2.0, folder=out)
    >>> marker.beat()
    >>> [m.rank for m in live_local(out)], [m.run for m in live_local(out / "20260101-000000-abcdef")]
    ([0], ['20260101-000000-abcdef'])
    >>> marker.remove()
    >>> live_local(out)
    []
"""

from __future__ import annotations

import glob
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf_callbacks.core.triggers.request_files import (
    REMOTE_CALL_S,
    LazyFs,
    read_remote_small,
    read_small,
    timeout_kw,
)

PREFIX = ".perf-callbacks-live-"
REFRESH_S = 30.0
"""How often a rank writes its marker again (a write to the ``output_dir`` every 30 s per rank, remote ones too)."""
STALE_REFRESHES = 3
"""A marker not written again for this many refreshes (and one poll) is stale: its run is gone."""


@dataclass(frozen=True)
class LiveRank:
    """One rank's marker, as read."""

    run: str
    rank: int
    pid: int
    host: str
    t: float
    poll_s: float
    refresh_s: float

    def live(self, now: float | None = None) -> bool:
        """Fresh, and on this machine its process still runs."""
        now = time.time() if now is None else now
        if now - self.t > STALE_REFRESHES * self.refresh_s + self.poll_s:
            return False
        return self.host != socket.gethostname() or _running(self.pid)


def marker_name(run: str, rank: int) -> str:
    """The marker's file name of ``rank`` of ``run``."""
    return f"{PREFIX}{run}-rank{rank}.json"


class LiveMarker:
    """One rank's marker in ``folder`` (local) or at ``remote`` (a :class:`LazyFs`); written from the request thread.

    Args:
        run: the run's name (its folder's).
        rank: this rank.
        poll_s: ``capture_poll_s``.
        folder: the local ``output_dir``; None with ``remote``.
        remote: the remote ``output_dir``.
    """

    def __init__(self, run: str, rank: int, poll_s: float, folder: Path | None = None,
                 remote: LazyFs | None = None) -> None:
        self.run, self.rank, self.poll_s, self.folder, self.remote = run, rank, poll_s, folder, remote
        self.name = marker_name(run, rank)
        self._written: float | None = None

    def beat(self) -> None:
        """Write the marker if it was never written or not for :data:`REFRESH_S` seconds."""
        now = time.monotonic()
        if self._written is not None and now - self._written < REFRESH_S:
            return
        body = json.dumps({"run": self.run, "rank": self.rank, "pid": os.getpid(), "host": socket.gethostname(),
                           "t": time.time(), "poll_s": self.poll_s, "refresh_s": REFRESH_S}).encode()
        if self.remote is not None:
            fs, root = self.remote.get()
            fs.pipe_file(f"{root}/{self.name}", body, **timeout_kw(fs, REMOTE_CALL_S))
        elif self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f"{self.name}.{os.getpid()}.tmp"
            try:
                tmp.write_bytes(body)
                os.replace(tmp, self.folder / self.name)
            except OSError:
                tmp.unlink(missing_ok=True)  # a full disk: no half-written file left behind
                raise
        self._written = now

    def remove(self) -> None:
        """Remove the marker (if this object wrote it)."""
        if self._written is None:
            return
        self._written = None
        if self.remote is not None:
            fs, root = self.remote.get()
            fs.rm_file(f"{root}/{self.name}", **timeout_kw(fs, REMOTE_CALL_S))
        elif self.folder is not None:
            (self.folder / self.name).unlink(missing_ok=True)


def parse_marker(body: bytes | None) -> LiveRank | None:
    """A marker's content; None when it is not one."""
    if not body:
        return None
    try:
        data = json.loads(body)
        return LiveRank(str(data["run"]), int(data["rank"]), int(data["pid"]), str(data["host"]), float(data["t"]),
                        float(data["poll_s"]), float(data["refresh_s"]))
    except (ValueError, TypeError, KeyError):
        return None


def live_local(folder: Path) -> list[LiveRank]:
    """The live ranks that watch ``folder``: a run's ``output_dir`` (its markers) or a run's folder in it."""
    found = [parse_marker(read_small(p)) for p in _glob(folder, f"{PREFIX}*.json")]
    if not found and folder.parent != folder:  # a run's folder: its markers are in the output_dir above
        pattern = f"{PREFIX}{glob.escape(folder.name)}-rank*.json"
        found = [parse_marker(read_small(p)) for p in _glob(folder.parent, pattern)]
    return [m for m in found if m is not None and m.live()]


def live_remote(fs: Any, root: str) -> list[LiveRank]:
    """The live ranks whose markers are in the remote folder ``root`` of ``fs`` (a bounded file system)."""
    paths = sorted(fs.glob(f"{root.rstrip('/')}/{PREFIX}*.json"))
    found = [parse_marker(read_remote_small(fs, p, timeout_s=None)) for p in paths]
    return [m for m in found if m is not None and m.live()]


def _glob(folder: Path, pattern: str) -> list[Path]:
    try:
        return sorted(folder.glob(pattern))
    except OSError:
        return []


def _running(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0
    return True

"""A window on request in a live run: a signal (``SIGUSR2``) or a request file ``capture`` in the run's folder.

The signal's handler is installed from the main thread only; it chains to the handler it replaced (a callable one)
and puts it back when the engine closes, if nothing replaced ours meanwhile. The file is JSON,
``{"id": "...", "steps": N}``, written by ``perf-callbacks capture RUN_DIR`` (:func:`write_request`). A background
thread per rank reads it every ``capture_poll_s`` seconds (an ``lstat`` of each path; nothing on the training thread,
not even at start): each rank serves each request id once and leaves the file in place for the other ranks, so every
rank that sees the folder (a shared file system, or the remote ``output_dir`` through fsspec) records the window
once. A request file already there at the thread's first look is an old one: it is not served. Only a regular file
of at most ``MAX_REQUEST_BYTES`` is read (``core/triggers/request_files.py``), a remote one with each call bounded;
after its first look the thread keeps the rank's live-run marker (``core/triggers/live.py``), which
``perf-callbacks capture`` looks for.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> request_id = write_request(folder, steps=2)
    >>> read_request(Path(folder) / REQUEST_FILE) == (request_id, 2)
    True
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from perf_callbacks.core.triggers.captures import CaptureSchedule
from perf_callbacks.core.triggers.live import LiveMarker
from perf_callbacks.core.triggers.request_files import LazyFs, read_remote_small, read_small

log = logging.getLogger(__name__)
REQUEST_FILE = "capture"
CLOSE_WAIT_S = 1.0
"""The longest :meth:`FileRequests.close` waits for the request thread (a daemon: it ends on its own after)."""
Reader = Callable[[], "tuple[str, int | None] | None"]


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


class SignalRequest:
    """``signame`` opens a window at the next step; the previous handler is still called, and restored by close.

    Args:
        signame: e.g. ``"SIGUSR2"``.
        schedule: where the request goes.
    """

    def __init__(self, signame: str, schedule: CaptureSchedule) -> None:
        self.signame, self.schedule = signame, schedule
        self.signum = signal.Signals[signame]
        self.previous: Any = None
        self.installed = False
        self._handle: Callable[[int, FrameType | None], None] | None = None

    def install(self) -> bool:
        """Install the handler (the main thread only: elsewhere Python forbids it); True when installed."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self.previous = signal.getsignal(self.signum)
        self._handle = _handler(weakref.ref(self), self.previous)
        signal.signal(self.signum, self._handle)
        self.installed = True
        return True

    def handle(self) -> None:
        """The signal came: a window at the next step."""
        self.schedule.request("signal", self.signame)

    def close(self) -> None:
        """Put the previous handler back, unless another one replaced ours since (then it stays)."""
        if not self.installed or threading.current_thread() is not threading.main_thread():
            return
        self.installed = False
        if signal.getsignal(self.signum) == self._handle:
            signal.signal(self.signum, self.previous if self.previous is not None else signal.SIG_DFL)


def _handler(ref: weakref.ReferenceType[SignalRequest], previous: Any) -> Callable[[int, FrameType | None], None]:
    """The installed handler: it holds the requests weakly (a process-wide handler keeps no engine alive)."""

    def handle(signum: int, frame: FrameType | None) -> None:
        owner = ref()
        if owner is not None:
            owner.handle()
        if callable(previous):
            previous(signum, frame)

    return handle


class FileRequests:
    """A daemon thread that serves each new request file's id once (see the module's docstring).

    Args:
        readers: one per place the file may be (each returns ``(id, steps)`` or None).
        schedule: where the request goes.
        every_s: seconds between two looks.
        marker: the rank's live-run marker, kept by the thread (None: none).
    """

    def __init__(self, readers: list[Reader], schedule: CaptureSchedule, every_s: float,
                 marker: LiveMarker | None = None) -> None:
        self.readers, self.schedule, self.every_s, self.marker = readers, schedule, every_s, marker
        self.served: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread: it notes the requests already there (old ones), then looks every ``every_s`` seconds."""
        self._thread = threading.Thread(target=_poll, args=(weakref.ref(self), self._stop, self.every_s),
                                        name="perf-callbacks-capture", daemon=True)
        self._thread.start()

    def _look(self, serve: bool) -> None:
        for read in self.readers:
            if self._stop.is_set():
                return
            try:
                found = read()
            except Exception:  # noqa: BLE001 - a storage that fails is asked again next time
                log.debug("perf-callbacks: the capture request could not be read", exc_info=True)
                continue
            if found is None or found[0] in self.served:
                continue
            self.served.add(found[0])
            if serve:
                self.schedule.request("file", found[0], found[1])
        self._beat()

    def _beat(self) -> None:
        if self.marker is None:
            return
        try:
            self.marker.beat()
        except Exception:  # noqa: BLE001 - the marker only helps the command line: tried again next time
            log.debug("perf-callbacks: the live-run marker could not be written", exc_info=True)

    def close(self) -> None:
        """Stop looking: waits :data:`CLOSE_WAIT_S` at most (the thread, a daemon, removes the marker as it ends)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT_S)


def _poll(ref: weakref.ReferenceType[FileRequests], stop: threading.Event, every_s: float) -> None:
    """The thread: note the old requests, then look every ``every_s`` seconds; remove the marker at the end.

    It holds the requests weakly and ends once they are gone: an engine never closed is not kept alive by its thread.
    """
    owner = ref()
    if owner is None:
        return
    marker = owner.marker
    owner._look(serve=False)
    del owner
    while not stop.wait(every_s):
        owner = ref()
        if owner is None:
            break
        owner._look(serve=True)
        del owner
    if marker is not None:
        try:
            marker.remove()
        except Exception:  # noqa: BLE001 - it goes stale by itself
            log.debug("perf-callbacks: the live-run marker could not be removed", exc_info=True)


def local_reader(path: Path) -> Reader:
    """Reads the request file at ``path`` (a regular file, bounded), only when its ``lstat`` changed since."""
    seen: list[Any] = [None]

    def read() -> tuple[str, int | None] | None:
        try:
            st = os.lstat(path)
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode)
        if key == seen[0]:
            return None
        seen[0] = key
        return read_request(path)

    return read


def remote_reader(url: str | LazyFs, storage_options: dict[str, Any] | None = None) -> Reader:
    """Reads ``url``'s request file through fsspec (made at the first read), size first, each call bounded."""
    remote = url if isinstance(url, LazyFs) else LazyFs(url, storage_options)

    def read() -> tuple[str, int | None] | None:
        fs, root = remote.get()
        target = f"{root}/{REQUEST_FILE}"
        fs.invalidate_cache(target)
        return parse_request(read_remote_small(fs, target))

    return read


class CaptureRequests:
    """The run's request sources: the signal (``capture_signal``) and the request file (``capture_poll_s``).

    Args:
        signame: the signal's name; None: none.
        every_s: seconds between two looks for the file; 0: no file.
        folders: local folders the file may be in (``output_dir`` first, then the run's folder).
        remote: the remote ``output_dir``, read through fsspec with ``storage_options``; None when local.
        schedule: where the requests go.
        run: the run's name, for the live-run marker in ``output_dir`` (the remote one, if any); None: no marker.
        rank: this rank, for the marker.
    """

    def __init__(
        self,
        signame: str | None,
        every_s: float,
        folders: list[Path],
        remote: str | None,
        storage_options: dict[str, Any] | None,
        schedule: CaptureSchedule,
        run: str | None = None,
        rank: int = 0,
    ) -> None:
        self.signal = SignalRequest(signame, schedule) if signame else None
        readers: list[Reader] = []
        marker: LiveMarker | None = None
        if every_s > 0:
            readers = [local_reader(f / REQUEST_FILE) for f in dict.fromkeys(folders)]
            far = LazyFs(remote, storage_options) if remote is not None else None
            if far is not None:
                readers.append(remote_reader(far))
            if run is not None and (far is not None or folders):
                marker = LiveMarker(run, rank, every_s, folder=None if far else folders[0], remote=far)
        self.files = FileRequests(readers, schedule, every_s, marker) if readers else None

    def start(self) -> None:
        """Install the handler and start the thread."""
        if self.signal is not None:
            self.signal.install()
        if self.files is not None:
            self.files.start()

    def close(self) -> None:
        """Restore the previous handler and stop the thread."""
        if self.signal is not None:
            self.signal.close()
        if self.files is not None:
            self.files.close()

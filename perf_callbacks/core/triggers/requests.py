"""A window on request in a live run: a signal (``SIGUSR2``) or a request file ``capture`` in the run's folder.

The signal's handler is installed from the main thread only; it chains to the handler it replaced (a callable one)
and puts it back when the engine closes, if nothing replaced ours meanwhile. The file is JSON,
``{"id": "...", "steps": N}``, written by ``perf-callbacks capture RUN_DIR`` (:func:`write_request`). A background
thread per rank reads it every ``capture_poll_s`` seconds (a ``stat`` of each path, nothing on the training thread):
each rank serves each request id once and leaves the file in place for the other ranks, so every rank that sees the
folder (a shared file system, or the remote ``output_dir`` through fsspec) records the window once. A request file
already there when training starts is an old one: it is not served.

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

log = logging.getLogger(__name__)
REQUEST_FILE = "capture"
Reader = Callable[[], "tuple[str, int | None] | None"]


def write_request(
    run_dir: str | os.PathLike[str], steps: int | None = None, storage_options: dict[str, Any] | None = None
) -> str:
    """Write a new request into ``run_dir`` (a folder or an fsspec URL) atomically; returns its id."""
    request_id = uuid.uuid4().hex[:12]
    body = json.dumps({"id": request_id, "steps": steps}).encode()
    target = str(run_dir)
    if "://" in target and not target.startswith("file://"):
        import fsspec

        fs, path = fsspec.core.url_to_fs(target, **(storage_options or {}))
        fs.pipe_file(f"{path.rstrip('/')}/{REQUEST_FILE}", body)
        return request_id
    folder = Path(target.removeprefix("file://"))
    tmp = folder / f".{REQUEST_FILE}.{request_id}.tmp"
    tmp.write_bytes(body)
    os.replace(tmp, folder / REQUEST_FILE)
    return request_id


def read_request(path: Path) -> tuple[str, int | None] | None:
    """``(id, steps)`` of the request file at ``path``; None when there is none (or it is not one)."""
    try:
        return parse_request(path.read_bytes())
    except OSError:
        return None


def parse_request(body: bytes) -> tuple[str, int | None] | None:
    """``(id, steps)`` from a request file's bytes; None when they are not a request."""
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
    """

    def __init__(self, readers: list[Reader], schedule: CaptureSchedule, every_s: float) -> None:
        self.readers, self.schedule, self.every_s = readers, schedule, every_s
        self.served: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Note the requests already there (old ones), then look every ``every_s`` seconds."""
        self._look(serve=False)
        self._thread = threading.Thread(target=_poll, args=(weakref.ref(self), self._stop, self.every_s),
                                        name="perf-callbacks-capture", daemon=True)
        self._thread.start()

    def _look(self, serve: bool) -> None:
        for read in self.readers:
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

    def close(self) -> None:
        """Stop looking (the thread ends within a moment; it is a daemon)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)


def _poll(ref: weakref.ReferenceType[FileRequests], stop: threading.Event, every_s: float) -> None:
    """The thread: look every ``every_s`` seconds.

    It holds the requests weakly and ends once they are gone: an engine never closed is not kept alive by its thread.
    """
    while not stop.wait(every_s):
        owner = ref()
        if owner is None:
            return
        owner._look(serve=True)
        del owner


def local_reader(path: Path) -> Reader:
    """Reads the request file at ``path``, only when its ``stat`` changed since the last read."""
    seen: list[Any] = [None]

    def read() -> tuple[str, int | None] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == seen[0]:
            return None
        seen[0] = key
        return read_request(path)

    return read


def remote_reader(url: str, storage_options: dict[str, Any] | None) -> Reader:
    """Reads ``url``'s request file through fsspec (the uploads' file system), its listing cache dropped first."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    target = f"{path.rstrip('/')}/{REQUEST_FILE}"

    def read() -> tuple[str, int | None] | None:
        fs.invalidate_cache(target)
        if not fs.exists(target):
            return None
        return parse_request(fs.cat_file(target))

    return read


class CaptureRequests:
    """The run's request sources: the signal (``capture_signal``) and the request file (``capture_poll_s``).

    Args:
        signame: the signal's name; None: none.
        every_s: seconds between two looks for the file; 0: no file.
        folders: local folders the file may be in (``output_dir`` and the run's folder).
        remote: the remote ``output_dir``, read through fsspec with ``storage_options``; None when local.
        schedule: where the requests go.
    """

    def __init__(
        self,
        signame: str | None,
        every_s: float,
        folders: list[Path],
        remote: str | None,
        storage_options: dict[str, Any] | None,
        schedule: CaptureSchedule,
    ) -> None:
        self.signal = SignalRequest(signame, schedule) if signame else None
        readers: list[Reader] = []
        if every_s > 0:
            readers = [local_reader(f / REQUEST_FILE) for f in dict.fromkeys(folders)]
            if remote is not None:
                readers.append(remote_reader(remote, storage_options))
        self.files = FileRequests(readers, schedule, every_s) if readers else None

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

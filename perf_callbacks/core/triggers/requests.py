"""A window on request in a live run: a signal (``SIGUSR2``) or a request file ``capture`` in the run's folder.

The signal's handler is in ``core/triggers/signals.py``. The file is JSON,
``{"id": "...", "steps": N}``, written by ``perf-callbacks capture RUN_DIR`` (:func:`write_request`). A background
thread per rank reads it every ``capture_poll_s`` seconds (an ``lstat`` of each path; nothing on the training thread,
not even at start): each rank serves each request id once and leaves the file in place for the other ranks, so every
rank that sees the folder (a shared file system, or the remote ``output_dir`` through fsspec) records the window
once. A request file already there at the thread's first look is an old one: it is not served. Only a regular file
of at most ``MAX_REQUEST_BYTES`` is read (``core/triggers/request_files.py``), a remote one with each call bounded;
after its first look the thread keeps the rank's live-run marker (``core/triggers/live.py``), which
``perf-callbacks capture`` looks for. In a run of more than one rank, a request opens at a step the ranks agree on
through the run's folder (``core/triggers/agreement.py``), not at each rank's next step; with
``capture_signal_all_ranks`` the signal on one rank writes such a request (the thread writes it, at its next look).

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> request_id = write_request(folder, steps=2)
    >>> read_request(Path(folder) / REQUEST_FILE) == (request_id, 2)
    True
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perf_callbacks.core.triggers.agreement import Agreement, Ranks
from perf_callbacks.core.triggers.captures import CaptureSchedule
from perf_callbacks.core.triggers.live import LiveMarker
from perf_callbacks.core.triggers.request_files import REQUEST_FILE as REQUEST_FILE
from perf_callbacks.core.triggers.request_files import LazyFs, read_remote_small
from perf_callbacks.core.triggers.request_files import parse_request as parse_request
from perf_callbacks.core.triggers.request_files import read_request as read_request
from perf_callbacks.core.triggers.request_files import write_request as write_request
from perf_callbacks.core.triggers.signals import SignalRequest as SignalRequest

log = logging.getLogger(__name__)
CLOSE_WAIT_S = 1.0
"""The longest :meth:`FileRequests.close` waits for the request thread (a daemon: it ends on its own after)."""
Reader = Callable[[], "tuple[str, int | None] | None"]


class FileRequests:
    """A daemon thread that serves each new request file's id once (see the module's docstring).

    Args:
        readers: one per place the file may be (each returns ``(id, steps)`` or None).
        schedule: where the request goes.
        every_s: seconds between two looks.
        marker: the rank's live-run marker, kept by the thread (None: none).
        agreement: the ranks' agreed step for each request (``core/triggers/agreement.py``); None: the next step.
        send: writes a request file for all ranks and says where (``capture_signal_all_ranks``); None: none.
    """

    def __init__(self, readers: list[Reader], schedule: CaptureSchedule, every_s: float,
                 marker: LiveMarker | None = None, agreement: Agreement | None = None,
                 send: Callable[[], str] | None = None) -> None:
        self.readers, self.schedule, self.every_s, self.marker = readers, schedule, every_s, marker
        self.agreement, self.send = agreement, send
        self.served: set[str] = set()
        self.outbox: collections.deque[str] = collections.deque()  # signals to send to all ranks (any thread)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread: it notes the requests already there (old ones), then looks every ``every_s`` seconds."""
        self._thread = threading.Thread(target=_poll, args=(weakref.ref(self), self._stop, self.every_s),
                                        name="perf-callbacks-capture", daemon=True)
        self._thread.start()

    def _look(self, serve: bool) -> None:
        agreement, new = self.agreement, set[str]()
        if agreement is not None:
            agreement.note()
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
            if serve and agreement is not None:
                new.add(found[0])
                self._guard(agreement.serve, found[0], found[1])
            elif serve:
                self.schedule.request("file", found[0], found[1])
        if agreement is not None and agreement.following:
            self._guard(agreement.recheck, new)
        self._send()
        self._beat()

    def _send(self) -> None:
        """Signals for all ranks: one request file each (read back at the next look, by this rank too)."""
        while self.outbox and self.send is not None:
            signame = self.outbox.popleft()
            try:
                where = self.send()
            except Exception as err:  # noqa: BLE001 - the storage failed: said once, training goes on
                log.info("perf-callbacks: %s: the request for all ranks could not be written (%s: %s)", signame,
                         type(err).__name__, err)
                continue
            log.info("perf-callbacks: %s: capture request for all ranks written to %s", signame, where)

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - a storage that fails is asked again next time
            log.debug("perf-callbacks: the capture agreement could not be read or written", exc_info=True)

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
        ranks: the run's ranks, with its folder and the open step: with ``world_size`` > 1 and ``step_now``, a
            request file opens at a step the ranks agree on (``core/triggers/agreement.py``); None: the next step.
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
        ranks: Ranks | None = None,
    ) -> None:
        readers: list[Reader] = []
        marker: LiveMarker | None = None
        self.files: FileRequests | None = None
        far = LazyFs(remote, storage_options) if remote is not None and every_s > 0 else None
        if every_s > 0:
            readers = [local_reader(f / REQUEST_FILE) for f in dict.fromkeys(folders)]
            if far is not None:
                readers.append(remote_reader(far))
            if run is not None and (far is not None or folders):
                marker = LiveMarker(run, rank, every_s, folder=None if far else folders[0], remote=far)
        if readers:
            agreement = ranks.agreement(schedule, every_s, far, rank) if ranks is not None else None
            send = ranks.sender(far) if ranks is not None and ranks.all_ranks else None
            self.files = FileRequests(readers, schedule, every_s, marker, agreement, send)
        outbox = self.files.outbox.append if self.files is not None and self.files.send is not None else None
        self.signal = SignalRequest(signame, schedule, outbox) if signame else None

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

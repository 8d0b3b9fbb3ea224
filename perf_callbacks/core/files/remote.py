"""``output_dir`` on object storage: files are staged on local disk and uploaded by a background thread.

An ``output_dir`` such as ``s3://bucket/perf``, ``gs://...`` or ``abfs://...`` (any fsspec URL but ``file://``) makes
each rank write exactly as it does locally, under a staging folder of its own on local disk
(``$PERF_CALLBACKS_STAGING``, else the system's temporary folder), with the same ``<run>/window-AAAAAA-BBBBBB/``
layout. When a window's files are finished (its background job has written the trace, the sidecar and the summary),
the training thread queues that folder (a ``put`` on a queue, nothing else), and this module's thread uploads every
finished file (hidden ``.partial`` names are left alone) to the same relative path under the URL, checks the
remote size, and only then removes the local copy. At close the rest of the run folder (TensorBoard events, OOM
folders) follows, with a bounded wait.

The remote never harms training: the first error that retries do not cure (a missing bucket or bad credentials at
once; an unreachable endpoint or a timeout after ``RETRY_DELAYS_S``) stops the uploads with one warning that names the
URL, the reason and the local folder that keeps the files.

Example:
    >>> resolve_output("file:///tmp/perf", rank=0)
    (PosixPath('/tmp/perf'), None)
    >>> resolve_output("s3://bucket/perf", rank=1)[1]
    's3://bucket/perf'
    >>> join_output("s3://bucket/logs/version_0", "perf")
    's3://bucket/logs/version_0/perf'
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401 - its pools' exit hook is registered before ours, so it runs after
import contextlib
import hashlib
import logging
import os
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perf_callbacks.core.files.outputs import Outputs

log = logging.getLogger(__name__)
RETRY_DELAYS_S = (0.5, 1.0, 2.0)
"""Waits before the second, third and fourth try of an upload that failed for a reason that may pass."""
FINISH_WAIT_S = 60.0
"""How long closing waits for pending uploads; what is left is said, with where it stays."""
_LOCAL = ("file", "local")


def is_remote(output_dir: str | os.PathLike[str]) -> bool:
    """``output_dir`` is a URL of a file system other than the local one (``s3://``, ``gs://``, ``memory://``...)."""
    text = os.fspath(output_dir)
    return "://" in text and text.split("://", 1)[0].lower() not in _LOCAL


def before_shutdown(fn: Callable[[], object]) -> Callable[[], None]:
    """Call ``fn`` once when the interpreter starts to exit, before it stops the thread pools; return the cancel.

    ``atexit`` runs too late for an upload: by then ``concurrent.futures`` refuses new work ("cannot schedule new
    futures after interpreter shutdown"), and the storage clients need its pools (aiohttp resolves host names in one).
    ``threading``'s own exit hooks run first, the last registered first: this one, then the pools' shutdown. ``fn``
    never raises out of it (that would skip the hooks after it); without those hooks, ``atexit`` is used. Only in
    this process: a DataLoader worker forked from it inherits the hook, and multiprocessing runs threading's exit
    hooks when the worker ends (closing the parent's hook there popped its NVTX ranges and wrote its files).
    """
    pending, pid = [fn], os.getpid()

    def run() -> None:  # not in a forked child: multiprocessing runs threading's exit hooks as each child ends
        if pending and os.getpid() == pid:
            with contextlib.suppress(Exception):
                pending.pop()()

    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise RuntimeError("no threading exit hooks")
        register(run)
    except RuntimeError:  # shutdown has begun, or an interpreter without them
        atexit.register(run)
    return pending.clear


def join_output(base: str | os.PathLike[str], name: str) -> str | Path:
    """``base/name``, for a URL (kept a string, its ``//`` intact) or a local path."""
    if is_remote(base):
        return f"{os.fspath(base).rstrip('/')}/{name}"
    return Path(_strip_file(os.fspath(base))) / name


def resolve_output(output_dir: str | os.PathLike[str], rank: int) -> tuple[Path, str | None]:
    """Where this rank writes, and the URL its files go to (None: ``output_dir`` is local and written directly)."""
    text = os.fspath(output_dir)
    if not is_remote(text):
        return Path(_strip_file(text)), None
    url = text.rstrip("/")
    root = Path(os.environ.get("PERF_CALLBACKS_STAGING") or tempfile.gettempdir())
    digest = hashlib.sha1(url.encode()).hexdigest()[:8]
    return root / "perf-callbacks-staging" / f"{digest}-rank{rank}-pid{os.getpid()}", url


class Uploads:
    """One rank's uploads of its staged files to ``url`` (a thread of its own, started here).

    Args:
        url: the remote ``output_dir``.
        staging: the local folder standing for ``url`` (see :func:`resolve_output`).
        storage_options: passed to ``fsspec.url_to_fs`` (endpoint, credentials...); else from the environment.
        outputs: the engine's writers: a failure turns off ``uploads`` with one warning.
    """

    def __init__(self, url: str, staging: Path, storage_options: Mapping[str, Any] | None, outputs: Outputs) -> None:
        self.url, self.staging, self.outputs = url, staging, outputs
        self._options = dict(storage_options or {})
        self._queue: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._done = threading.Event()
        self.error: str | None = None  # set by the thread: why uploads stopped
        self.uploaded = 0
        self._reported = False
        threading.Thread(target=self._serve, name="perf-callbacks-uploads", daemon=True).start()

    # ---- training thread ------------------------------------------------------------------------------------------
    def shown(self, text: str) -> str:
        """``text`` with staged paths named by their URL, where the user will find them."""
        return text.replace(str(self.staging), self.url)

    def url_of(self, local: Path) -> str:
        """The URL that the staged file or folder ``local`` is uploaded to."""
        relative = local.relative_to(self.staging).as_posix()
        return self.url if relative == "." else f"{self.url}/{relative}"

    def submit(self, folder: Path) -> None:
        """Upload the finished files under ``folder`` (queued: returns at once)."""
        self._queue.put(folder)

    @property
    def news(self) -> bool:
        """A failure not yet reported."""
        return self.error is not None and not self._reported

    def report(self) -> None:
        """Warn once (through ``outputs``) if uploads stopped."""
        if self.error is not None and not self._reported:
            self._reported = True
            self.outputs.failed("uploads", f"cannot upload to {self.url}: {self.error}; the files stay in "
                                           f"{self.staging}")

    def finish(self, timeout_s: float = FINISH_WAIT_S) -> list[Path]:
        """Upload the rest of the staging folder, waiting up to ``timeout_s``; say what is left, and where.

        Returns the files left on local disk.
        """
        self._queue.put(self.staging)
        self._queue.put(None)
        t0 = time.monotonic()
        try:
            finished = self._done.wait(timeout_s)
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, say what is left
            finished = False
        self.report()
        left = _files(self.staging)
        if left:
            why = self.error or (f"still uploading after {time.monotonic() - t0:.0f} s" if not finished else "")
            print(f"perf-callbacks: {len(left)} file(s) not uploaded to {self.url}" + (f" ({why})" if why else "") +
                  f"; they are kept in {self.staging}", file=sys.stderr, flush=True)
        elif finished:
            _remove_empty_tree(self.staging)
            log.info("perf-callbacks: %d file(s) uploaded to %s", self.uploaded, self.url)
        return left

    # ---- upload thread --------------------------------------------------------------------------------------------
    def _serve(self) -> None:
        fs: Any = None
        while (folder := self._queue.get()) is not None:
            if self.error is not None:
                continue
            try:
                fs = fs or self._connect()
                for f in _files(folder):
                    if not self._upload(fs, f):
                        break
            except Exception as err:  # noqa: BLE001 - never a traceback from this thread
                self.error = _reason(err)
        self._done.set()

    def _connect(self) -> Any:
        import fsspec

        fs, _ = fsspec.core.url_to_fs(self.url, **self._options)
        return fs

    def _upload(self, fs: Any, local: Path) -> bool:
        """Upload ``local``, retrying what may pass; False (and ``error`` set) when uploads must stop."""
        dest = self.url_of(local)
        err: BaseException | None = None
        for delay in (0.0, *RETRY_DELAYS_S):
            time.sleep(delay)
            try:
                size = local.stat().st_size
                fs.put_file(str(local), dest)
                if (remote := fs.size(dest)) != size:
                    raise OSError(f"{dest} holds {remote} bytes after the upload, not {size}")
            except FileNotFoundError as e:
                if not local.exists():  # removed meanwhile (a retried write): nothing to upload
                    return True
                err = e
                break  # a missing bucket: retrying does not help
            except PermissionError as e:  # bad credentials, access denied
                err = e
                break
            except Exception as e:  # noqa: BLE001 - connection refused, timeouts, 5xx: retried
                err = e
                log.debug("perf-callbacks: upload of %s failed, retrying", local, exc_info=True)
                continue
            local.unlink(missing_ok=True)
            self.uploaded += 1
            return True
        self.error = _reason(err) if err is not None else "unknown error"
        return False


def _strip_file(text: str) -> str:
    return text.split("://", 1)[1] if text.lower().startswith(("file://", "local://")) else text


def _files(folder: Path) -> list[Path]:
    """Finished files under ``folder``: no hidden part (``.partial`` scratch files, temporary sidecars)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _remove_empty_tree(root: Path) -> None:
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        _rmdir(folder)
    _rmdir(root)


def _rmdir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


def _reason(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return f"{type(err).__name__}: {text}" if type(err).__name__ not in text else text

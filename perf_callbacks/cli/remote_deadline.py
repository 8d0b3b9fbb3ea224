"""One deadline for every request of a remote read, and the storage's errors told in one line.

The reading of a URL by ``perf-callbacks report`` and ``diff`` (``cli/remote_read.py``) has one overall bound,
``timeout_s``: an endpoint that accepts connections and never answers would otherwise hold the command for botocore's
read timeout times every retry (minutes). :class:`Bounded` wraps the URL's file system so that each call gets the time
left, past which :class:`RemoteTimeout` says so. Within that bound, a request that makes no progress for
:data:`NO_PROGRESS_S` (no answer, or a download whose file stops growing) ends at once with :class:`RemoteStalled`: an
endpoint that accepts connections and never sends a byte costs 30 s, not the whole bound. An unreachable endpoint or
missing or refused credentials become one :class:`RemoteError` that names the URL and the cause, and a missing object
stays a ``FileNotFoundError``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Callable
from typing import Any

TIMEOUT_S = 300.0
"""Default bound, in seconds, on reading one command's remote files (``--timeout``, ``PERF_CALLBACKS_TIMEOUT``)."""
TIMEOUT_ENV = "PERF_CALLBACKS_TIMEOUT"
NO_PROGRESS_S = 30.0
"""A request that receives nothing for this many seconds ends the read (``$PERF_CALLBACKS_NO_PROGRESS_S``)."""
NO_PROGRESS_ENV = "PERF_CALLBACKS_NO_PROGRESS_S"
_POLL_S = 0.25
_NETWORK_MODULES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "adlfs", "google", "azure", "requests",
                    "urllib3", "fsspec")


class RemoteError(OSError):
    """The storage could not be read: an unreachable endpoint, refused or missing credentials, a timeout."""


class RemoteTimeout(RemoteError, TimeoutError):
    """The reading of a URL went past its ``timeout_s``."""


class RemoteStalled(RemoteTimeout):
    """A request to the storage received nothing for :data:`NO_PROGRESS_S` seconds."""


def timeout_from_env() -> float:
    """``$PERF_CALLBACKS_TIMEOUT`` in seconds, else :data:`TIMEOUT_S`; 0 means no bound.

    Raises:
        ValueError: the variable is not a number >= 0.
    """
    return _seconds_from_env(TIMEOUT_ENV, TIMEOUT_S)


def no_progress_from_env() -> float:
    """``$PERF_CALLBACKS_NO_PROGRESS_S`` in seconds, else :data:`NO_PROGRESS_S`; 0 means no bound.

    Raises:
        ValueError: the variable is not a number >= 0.
    """
    return _seconds_from_env(NO_PROGRESS_ENV, NO_PROGRESS_S)


def _seconds_from_env(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{name} must be a number of seconds >= 0, got {text!r}")
    return value


class Bounded:
    """A file system whose calls all end by one deadline, their storage errors told as :class:`RemoteError`.

    An asynchronous back end (s3fs, gcsfs, adlfs: fsspec runs their requests on its own event loop) gets each call's
    share of the time left as fsspec's ``timeout``, which cancels the request; a synchronous one cannot be cancelled
    and is not bounded.
    """

    def __init__(self, fs: Any, url: str, timeout_s: float | None, no_progress_s: float | None = None) -> None:
        from fsspec.asyn import AsyncFileSystem

        self._fs, self._url, self._timeout_s = fs, url, timeout_s or None
        self._deadline = time.monotonic() + timeout_s if timeout_s else None
        self._bounded = isinstance(fs, AsyncFileSystem) and not fs.asynchronous
        self._stall_s = (no_progress_from_env() if no_progress_s is None else no_progress_s) or None

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fs, name)
        return self._call(name, attr) if callable(attr) else attr

    def _call(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        coroutine: Any = getattr(self._fs, f"_{name}", None) if self._bounded else None
        watched = inspect.iscoroutinefunction(coroutine)

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._deadline is not None and self._bounded and not watched:
                left = self._deadline - time.monotonic()
                if left <= 0:
                    raise self._timed_out()
                kwargs["timeout"] = left
            try:
                if watched:
                    progress = _progress(name, args, kwargs)
                    return self._watch(coroutine(*args, **kwargs), progress)
                return method(*args, **kwargs)
            except (FileNotFoundError, RemoteTimeout):
                raise
            except Exception as err:
                if self._deadline is not None and (type(err).__name__ == "FSTimeoutError"
                                                   or time.monotonic() >= self._deadline):
                    raise self._timed_out() from err
                if isinstance(err, TypeError) and "keyword argument" in str(err):  # the client is made lazily
                    raise bad_options(self._url, err) from err
                if isinstance(err, OSError) or type(err).__module__.split(".")[0] in _NETWORK_MODULES:
                    raise RemoteError(f"cannot read {self._url}: {_cause(err)}") from err
                raise

        return call

    def _watch(self, coroutine: Any, progress: Callable[[], tuple[int, int]]) -> Any:
        """Run ``coroutine`` on the file system's loop until it ends, stalls or passes the deadline (then cancelled)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._fs.loop)
        seen, since = progress(), time.monotonic()
        try:
            while not future.done():
                try:
                    future.result(timeout=_POLL_S)
                except KeyboardInterrupt:
                    raise
                except BaseException:  # noqa: BLE001, S110 - still running, or done: its outcome is read below
                    pass
                now, moved = time.monotonic(), progress()
                if moved != seen:
                    seen, since = moved, now
                if self._stall_s is not None and now - since >= self._stall_s and not future.done():
                    raise RemoteStalled(f"no answer from {self._url} for {self._stall_s:g} s: the storage stopped "
                                        f"sending (${NO_PROGRESS_ENV} sets this bound; 0: none)")
                if self._deadline is not None and now >= self._deadline and not future.done():
                    raise self._timed_out()
        finally:
            future.cancel()
        return future.result()

    def _timed_out(self) -> RemoteTimeout:
        return RemoteTimeout(f"timed out after {self._timeout_s:g} s reading {self._url}: the storage did not answer "
                             f"in time (raise --timeout or ${TIMEOUT_ENV}; 0: no bound)")


def _progress(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], tuple[int, int]]:
    """How far a call has come.

    For a download (``get_file``), the bytes its callback was told of and the size of its local file so far (a
    callback is added to ``kwargs`` when none is given); for any other call, nothing.
    """
    if name != "get_file" or len(args) < 2:
        return lambda: (0, 0)
    from fsspec.callbacks import Callback

    told = kwargs.setdefault("callback", Callback())

    def moved() -> tuple[int, int]:
        try:
            size = os.stat(args[1]).st_size
        except (OSError, TypeError, ValueError):
            size = 0
        return int(getattr(told, "value", 0) or 0), size

    return moved


def bad_options(url: str, err: TypeError) -> ValueError:
    """Storage options that the back end refuses (not printed: they may hold credentials)."""
    return ValueError(f"the storage options are not accepted for {url}: {err}")


def _cause(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if type(err).__name__ in text else f"{type(err).__name__}: {text}"

"""One deadline for every request of a remote read, and the storage's errors told in one line.

The reading of a URL by ``perf-callbacks report`` and ``diff`` (``cli/remote_read.py``) has one overall bound,
``timeout_s``: an endpoint that accepts connections and never answers would otherwise hold the command for botocore's
read timeout times every retry (minutes). :class:`Bounded` wraps the URL's file system so that each call gets the time
left, past which :class:`RemoteTimeout` says so; an unreachable endpoint or missing or refused credentials become one
:class:`RemoteError` that names the URL and the cause, and a missing object stays a ``FileNotFoundError``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

TIMEOUT_S = 300.0
"""Default bound, in seconds, on reading one command's remote files (``--timeout``, ``PERF_CALLBACKS_TIMEOUT``)."""
TIMEOUT_ENV = "PERF_CALLBACKS_TIMEOUT"
_NETWORK_MODULES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "adlfs", "google", "azure", "requests",
                    "urllib3", "fsspec")


class RemoteError(OSError):
    """The storage could not be read: an unreachable endpoint, refused or missing credentials, a timeout."""


class RemoteTimeout(RemoteError, TimeoutError):
    """The reading of a URL went past its ``timeout_s``."""


def timeout_from_env() -> float:
    """``$PERF_CALLBACKS_TIMEOUT`` in seconds, else :data:`TIMEOUT_S`; 0 means no bound.

    Raises:
        ValueError: the variable is not a number >= 0.
    """
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds >= 0, got {text!r}")
    return value


class Bounded:
    """A file system whose calls all end by one deadline, their storage errors told as :class:`RemoteError`.

    An asynchronous back end (s3fs, gcsfs, adlfs: fsspec runs their requests on its own event loop) gets each call's
    share of the time left as fsspec's ``timeout``, which cancels the request; a synchronous one cannot be cancelled
    and is not bounded.
    """

    def __init__(self, fs: Any, url: str, timeout_s: float | None) -> None:
        from fsspec.asyn import AsyncFileSystem

        self._fs, self._url, self._timeout_s = fs, url, timeout_s or None
        self._deadline = time.monotonic() + timeout_s if timeout_s else None
        self._bounded = isinstance(fs, AsyncFileSystem) and not fs.asynchronous

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fs, name)
        return self._call(attr) if callable(attr) else attr

    def _call(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self._deadline is not None and self._bounded:
                left = self._deadline - time.monotonic()
                if left <= 0:
                    raise self._timed_out()
                kwargs["timeout"] = left
            try:
                return method(*args, **kwargs)
            except FileNotFoundError:
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

    def _timed_out(self) -> RemoteTimeout:
        return RemoteTimeout(f"timed out after {self._timeout_s:g} s reading {self._url}: the storage did not answer "
                             f"in time (raise --timeout or ${TIMEOUT_ENV}; 0: no bound)")


def bad_options(url: str, err: TypeError) -> ValueError:
    """Storage options that the back end refuses (not printed: they may hold credentials)."""
    return ValueError(f"the storage options are not accepted for {url}: {err}")


def _cause(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if type(err).__name__ in text else f"{type(err).__name__}: {text}"

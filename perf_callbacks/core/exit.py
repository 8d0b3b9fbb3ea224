"""How this process ends: SIGTERM (preemption) turned into a ``SystemExit``, and the exception that ends it.

A flush at exit (a hook or engine its owner never closed) needs both: the adapters install the SIGTERM handler, the
engine asks :class:`ExitCause` at exit what ended the process.

Example:
    >>> cause = ExitCause()
    >>> cause() is None  # nothing is ending this process
    True
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def catch_sigterm() -> bool:
    """Turn SIGTERM (preemption) into ``SystemExit(143)``, so the adapter flushes the window before the process exits.

    Only when SIGTERM still has its default action (which kills the process with no cleanup at all) and this is the
    main thread; a handler the user or a launcher installed is left alone. Returns whether it was installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _preempted)
    return True


def release_sigterm() -> None:
    """Give SIGTERM its default action back, if :func:`catch_sigterm` installed ours."""
    if signal.getsignal(signal.SIGTERM) is _preempted:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


class ExitCause:
    """At interpreter exit, the exception that is ending the process, as far as it can be known.

    A flush at exit (a hook or engine its owner never closed) closes with it, as a ``with`` block or an ``except``
    would: an uncaught exception (``sys.last_value``, set once its traceback is printed; not one that was already
    there when this object was created), else the ``SystemExit`` that our SIGTERM handler raised, else None. A
    ``sys.exit()`` of the user's own cannot be told from a normal exit. Either one from before this object was created
    is ignored.
    """

    def __init__(self) -> None:
        self._before = self._seen()

    def __call__(self) -> BaseException | None:
        """The exception ending the process, or None."""
        return next((e for e in self._seen() if e is not None and e not in self._before), None)

    @staticmethod
    def _seen() -> tuple[BaseException | None, ...]:
        uncaught = getattr(sys, "last_value", None)
        return (uncaught if isinstance(uncaught, BaseException) else None, *_preemption)


_preemption: list[SystemExit] = []  # the SystemExit our SIGTERM handler raised, if it did


def _preempted(signum: int, frame: Any) -> None:
    _preemption[:] = [SystemExit(128 + signum)]
    raise _preemption[0]


def close_at_exit(owner: T, close: Callable[[T], None]) -> Callable[[], None]:
    """Run ``close(owner)`` at interpreter exit, unless the handler it returns is unregistered first (``atexit``).

    The handler holds ``owner`` weakly (it never keeps an unclosed owner alive) and runs only in the process that
    registered it: a child made with a plain ``os.fork()`` inherits the handler and a copy of the owner, but not its
    threads, and closing that copy would write the parent's files and wait for jobs that never end.
    """
    handler = functools.partial(_close_if_alive, weakref.ref(owner), os.getpid(), close)
    atexit.register(handler)
    return handler


def _close_if_alive(ref: weakref.ReferenceType[T], pid: int, close: Callable[[T], None]) -> None:
    if os.getpid() == pid and (owner := ref()) is not None:
        close(owner)

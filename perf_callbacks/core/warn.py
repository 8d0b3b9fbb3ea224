"""Warnings that point at the user's code and start with ``perf-callbacks:``.

A warning raised from inside a Trainer hook would otherwise be attributed to ``engine.py`` or to Lightning's loop,
which tells the user nothing; the warning is attributed to the first frame on the stack outside perf-callbacks and
the training frameworks (the user's ``trainer.fit(...)`` line or training loop).

Where Python prints it (``warnings.showwarning``), it prints one line that starts with ``perf-callbacks:``, its
category and the user's line at the end, not ``train.py:42: DataLoaderWarning: perf-callbacks: ...`` and the source
line: ``warnings.formatwarning`` (the documented hook for that) is ours only while our own ``warnings.warn`` runs, and
hands any other message to the one it replaced. Filters, ``-W error``, ``pytest.warns`` and ``catch_warnings(record=
True)`` see the same category and message as before; other libraries' warnings are never touched.

Example:
    >>> import io
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("always")
    ...     warnings.showwarning = lambda *a, **k: print(warnings.formatwarning(*a[:4]), end="")
    ...     warn_user("data wait 31%", UserWarning)  # doctest: +ELLIPSIS
    perf-callbacks: data wait 31% (UserWarning, ...)
"""

from __future__ import annotations

import logging
import sys
import threading
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Protocol, TypeVar

PREFIX = "perf-callbacks: "
_FRAMEWORKS = frozenset(
    {"perf_callbacks", "lightning", "pytorch_lightning", "lightning_fabric", "accelerate", "transformers", "torch",
     "contextlib", "threading", "typing_extensions"}
)


class WarnFn(Protocol):
    """How a part of the engine warns: ``warn(key, category, message)``, once per key (:class:`WarnOnce`).

    ``main_only`` (default True): said on the main rank alone; False: on every rank that sees it.
    """

    def __call__(self, key: str, category: type[Warning], message: str, main_only: bool = True, /) -> None:
        """Warn ``message`` under ``key`` unless it was already said."""


T = TypeVar("T")
log = logging.getLogger(__name__)


def quiet(fn: Callable[[], T], what: str = "during close") -> T | None:
    """``fn()``, or None if it raised: the error is logged at debug level (cleanup never raises into training)."""
    try:
        return fn()
    except Exception:  # noqa: BLE001 - cleanup must never raise
        log.debug("ignored error %s", what, exc_info=True)
        return None


_SWAP = threading.RLock()  # our swaps of warnings.formatwarning, one at a time (a handler may warn again)


def warn_user(message: str, category: type[Warning]) -> None:
    """Emit ``message`` as ``category``, attributed to the user's code."""
    _warn(message, category, user_stacklevel())


def user_stacklevel() -> int:
    """The ``stacklevel`` (relative to the caller of :func:`warn_user`) of the first frame outside the frameworks."""
    frame: FrameType | None = sys._getframe(2)  # the caller of warn_user
    level = 2
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.split(".", 1)[0] not in _FRAMEWORKS:
            return level
        frame, level = frame.f_back, level + 1
    return 2


class WarnOnce:
    """Each warning once per key, on the main rank unless ``main_only=False``; attributed to the user's code.

    Args:
        is_main: this process is rank 0.
    """

    def __init__(self, is_main: bool) -> None:
        self.is_main = is_main
        self.said: set[str] = set()

    def __call__(self, key: str, category: type[Warning], message: str, main_only: bool = True) -> None:
        """Warn ``message`` under ``key`` unless it was already said (or this is not the main rank)."""
        if key in self.said or (main_only and not self.is_main):
            return
        self.said.add(key)
        _warn(message, category, user_stacklevel())


def _warn(message: str, category: type[Warning], stacklevel: int) -> None:
    """``warnings.warn`` (``stacklevel`` relative to our caller's caller), printed as one ``perf-callbacks:`` line."""
    text = message if message.startswith(PREFIX) else PREFIX + message
    with _SWAP:
        replaced = warnings.formatwarning
        ours = _one_line(replaced)
        warnings.formatwarning = ours
        try:
            warnings.warn(text, category, stacklevel=stacklevel + 1)
        finally:
            if warnings.formatwarning is ours:  # else someone replaced it meanwhile: theirs stays
                warnings.formatwarning = replaced


def _one_line(fallback: Callable[..., str]) -> Callable[..., str]:
    def formatwarning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      line: str | None = None) -> str:
        text = str(message)
        if not text.startswith(PREFIX):  # another thread's warning, printed while ours is on its way
            return fallback(message, category, filename, lineno, line)
        return f"{text} ({category.__name__}, {filename}:{lineno})\n"

    return formatwarning

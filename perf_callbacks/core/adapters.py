"""What every adapter does the same way.

The checkpoint and validation ranges around a framework's own methods, the batch size of a batch, and whether
``torch.distributed`` is up.

Example:
    >>> import torch
    >>> batch_size({"input_ids": torch.zeros(8, 128), "labels": torch.zeros(8)})
    8
"""

from __future__ import annotations

import functools
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from perf_callbacks.core.memory import OutOfMemoryError

if TYPE_CHECKING:
    from perf_callbacks.core.engine import PerfEngine

MARK = "__perf_callbacks__"  # set on every wrapper we install, so it is recognised and removed, never stacked


def in_phase(live: Callable[[], PerfEngine | None], phase: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a framework method (a checkpoint save, an evaluation, ``backward``) in the engine's ``phase`` range.

    While ``live()`` returns an engine, each call runs in that range; ``checkpoint`` and ``validation`` time is left
    out of step time and data wait. An out-of-memory error inside it is noted with the phase before it propagates.
    """

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            engine = live()
            if engine is None:
                return method(*args, **kwargs)
            start, end = _RANGES.get(phase, (lambda e: e.phase(phase), lambda e: e.end_phase()))
            start(engine)
            try:
                return method(*args, **kwargs)
            except OutOfMemoryError as err:
                engine.note_failure(err, phase)
                raise
            finally:
                end(engine)

        setattr(wrapped, MARK, True)
        return wrapped

    return wrap


_RANGES: dict[str, tuple[Callable[[PerfEngine], None], Callable[[PerfEngine], None]]] = {
    "checkpoint": (lambda e: e.checkpoint_start(), lambda e: e.checkpoint_end()),
    "validation": (lambda e: e.validation_start(), lambda e: e.validation_end()),
}


def is_ours(fn: Any) -> bool:
    """``fn`` is a wrapper perf-callbacks installed."""
    return bool(getattr(fn, MARK, False))


def batch_size(batch: Any) -> int | None:
    """The leading dimension of the first tensor in ``batch`` (a tensor, a mapping or a sequence), else None."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, list | tuple) else ()
    return next((n for n in map(batch_size, values) if n is not None), None)


def distributed_initialized() -> bool:
    """``torch.distributed`` is available and its default process group is up."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


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

"""What ``TrainerCallback`` events cannot see, taken from the ``transformers.Trainer`` itself.

Callbacks never receive the Trainer, so :func:`find_trainer` takes it from the stack: ``self`` of the Trainer method
that fired the event (``__init__`` for ``on_init_end``, the training loop for ``on_train_begin``). Subclasses (TRL's
trainers) are Trainers too.

:func:`install` then wraps, as instance attributes that :func:`uninstall` removes (a subclass's overrides are kept,
since the wrappers call the bound methods):

- ``get_batch_samples(epoch_iterator, ...)``: the iterator is wrapped so that each ``__next__``, the DataLoader's
  time and nothing else, is data wait; the batches' sizes count the samples of the optimizer step;
- ``evaluate``: the ``validation`` range, left out of step time;
- ``_save_checkpoint``: the ``checkpoint`` range (``on_save`` only fires after the save);
- ``accelerator.backward``: the ``backward`` range.

:func:`wrap_train` wraps ``Trainer.train`` so that an exception (Ctrl-C and SIGTERM's ``SystemExit`` too) closes the
engine, flushing the partial window, before it propagates unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import FrameType
from typing import Any

from transformers import Trainer

from perf_callbacks.core.engine.engine import PerfEngine
from perf_callbacks.integrations._adapters import MARK, batch_size, in_phase, is_ours

LiveEngine = Callable[[], "PerfEngine | None"]
_METHODS = ("get_batch_samples", "evaluate", "_save_checkpoint")


def find_trainer(frame: FrameType | None, depth: int = 16) -> Trainer | None:
    """The Trainer whose method fired the current event: ``self`` of the nearest Trainer frame up the stack."""
    for _ in range(depth):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None


def install(trainer: Trainer, live: LiveEngine, count_samples: Callable[[int], None]) -> None:
    """Wrap the Trainer's methods for this run (see the module docstring); a method already wrapped is left alone."""
    wrappers = {
        "get_batch_samples": _timed_get_batch_samples(live, count_samples),
        "evaluate": in_phase(live, "validation"),
        "_save_checkpoint": in_phase(live, "checkpoint"),
    }
    for name, wrap in wrappers.items():
        if name not in vars(trainer) and hasattr(trainer, name):
            setattr(trainer, name, wrap(getattr(trainer, name)))
    acc = getattr(trainer, "accelerator", None)
    if acc is not None and "backward" not in vars(acc):
        acc.backward = in_phase(live, "backward")(acc.backward)


def uninstall(trainer: Trainer) -> None:
    """Remove the wrappers :func:`install` added (only ours)."""
    for name in _METHODS:
        if is_ours(vars(trainer).get(name)):
            delattr(trainer, name)
    acc = getattr(trainer, "accelerator", None)
    if acc is not None and is_ours(vars(acc).get("backward")):
        del acc.backward


def wrap_train(train: Callable[..., Any], close: Callable[[BaseException | None], None]) -> Callable[..., Any]:
    """``train`` that calls ``close(exc)`` on any exception before re-raising it, and ``close(None)`` after."""

    @functools.wraps(train)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return train(*args, **kwargs)
        except BaseException as exc:  # Ctrl-C and SIGTERM's SystemExit too; re-raised unchanged
            close(exc)
            raise
        finally:
            close(None)

    setattr(wrapped, MARK, True)
    return wrapped


class TimedIterator:
    """The Trainer's epoch iterator, with each ``__next__`` (the DataLoader's time alone) timed as data wait.

    Args:
        it: the epoch iterator.
        engine: receives ``data_start``/``data_end`` around each ``next``.
    """

    __slots__ = ("_engine", "_it")

    def __init__(self, it: Any, engine: PerfEngine) -> None:
        self._it, self._engine = it, engine

    def __iter__(self) -> TimedIterator:
        return self

    def __next__(self) -> Any:
        self._engine.data_start()
        try:
            return next(self._it)
        finally:
            self._engine.data_end()


def _timed_get_batch_samples(live: LiveEngine, count_samples: Callable[[int], None]) -> Any:
    def wrap(get_batch_samples: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(get_batch_samples)
        def wrapped(epoch_iterator: Any, *args: Any, **kwargs: Any) -> Any:
            engine = live()
            if engine is None:
                return get_batch_samples(epoch_iterator, *args, **kwargs)
            result = get_batch_samples(TimedIterator(epoch_iterator, engine), *args, **kwargs)
            count_samples(sum(batch_size(b) or 0 for b in result[0]))
            return result

        setattr(wrapped, MARK, True)
        return wrapped

    return wrap

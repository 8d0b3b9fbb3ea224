"""The Trainer methods GPUPerfCallback wraps for a ``fit``, as instance attributes removed when it ends.

- ``trainer.save_checkpoint`` (what ModelCheckpoint calls) gets a ``checkpoint`` range.
- The training epoch loop's fetch hooks time the DataLoader's ``next()`` alone as data wait.
- With them, the optimizers' step post hooks mark the user's own time after each optimizer step for the hang
  watchdog (``core/hang/own_code.py``): the callbacks' ``on_train_batch_end`` (also those that run before ours),
  until the next fetch. The engine's close takes them off.
"""

from __future__ import annotations

import lightning.pytorch as pl

from perf_callbacks.core.engine.engine import PerfEngine
from perf_callbacks.core.hang.own_code import mark_after_steps
from perf_callbacks.integrations._adapters import MARK, in_phase, is_ours


def wrap_save_checkpoint(trainer: pl.Trainer, engine: PerfEngine) -> None:
    """Give ``trainer.save_checkpoint`` (what ModelCheckpoint calls) a ``checkpoint`` range.

    Removed at teardown, or in ``on_exception`` when ``fit`` fails.
    """
    save = type(trainer).save_checkpoint.__get__(trainer)
    trainer.save_checkpoint = in_phase(lambda: engine, "checkpoint")(save)  # type: ignore[method-assign]


def unwrap_save_checkpoint(trainer: pl.Trainer) -> None:
    """Remove the ``save_checkpoint`` wrapper, if it is ours."""
    if is_ours(vars(trainer).get("save_checkpoint")):
        del trainer.save_checkpoint


def wrap_fetch(trainer: pl.Trainer, engine: PerfEngine) -> None:
    """Time the training DataLoader's ``__next__`` only: the loop's fetch hooks run right around ``next(iterator)``.

    ``_TrainingEpochLoop.on_run_start`` installs its ``_on_before_fetch``/``_on_after_fetch`` as the data fetcher's
    profiler hooks at every epoch start; instance attributes here take their place, installed at ``on_train_start``
    (so a learning-rate or batch-size search run before it in ``on_fit_start`` is not timed) and removed at teardown
    or when the fit fails. A wrapper left by an earlier fit is replaced, never wrapped. The optimizers (they exist
    by then) get the hang watchdog's step post hooks.
    """
    if (hang := engine.hang) is not None:
        hang.removers += mark_after_steps(engine.state, trainer.optimizers)
    unwrap_fetch(trainer)
    loop = trainer.fit_loop.epoch_loop
    before, after = getattr(loop, "_on_before_fetch", None), getattr(loop, "_on_after_fetch", None)
    if before is None or after is None:  # another Lightning version: data wait is not measured
        return

    def on_before_fetch() -> None:
        engine.data_start()
        before()

    def on_after_fetch() -> None:
        after()
        engine.data_end()

    setattr(on_before_fetch, MARK, True)
    setattr(on_after_fetch, MARK, True)
    loop._on_before_fetch, loop._on_after_fetch = on_before_fetch, on_after_fetch  # type: ignore[method-assign]


def unwrap_fetch(trainer: pl.Trainer) -> None:
    """Remove the fetch-hook wrappers, if they are ours."""
    loop = trainer.fit_loop.epoch_loop
    for name in ("_on_before_fetch", "_on_after_fetch"):
        if is_ours(vars(loop).get(name)):
            del loop.__dict__[name]


def undo_failed_fit(trainer: pl.Trainer, engine: PerfEngine | None) -> None:
    """After ``on_exception`` (Lightning calls no teardown hook after a failed fit): our wrappers off.

    The signal handler ours replaced is the one Lightning puts back (the engine is closed by then).

    Our handler is installed in ``setup``; Lightning's signal connector then saves every handler and restores them in
    the Trainer's teardown, which runs after ``on_exception`` when ``fit`` fails (an exception in ``training_step``, a
    sanity-check error, ``Ctrl-C``): it would re-install the handler that :meth:`PerfEngine.close` had just removed.
    Another Lightning version, without that connector: the wrappers only.
    """
    unwrap_save_checkpoint(trainer)
    unwrap_fetch(trainer)
    saved = getattr(getattr(trainer, "_signal_connector", None), "_original_handlers", None)
    if engine is None or not isinstance(saved, dict):
        return
    for signum, (ours, previous) in engine.captures.replaced_handlers().items():
        if saved.get(signum) is ours:
            saved[signum] = previous

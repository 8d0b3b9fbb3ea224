"""Metrics of the transformers adapter go through the Trainer's own reporting: the ``report_to`` integrations.

The engine hands rank 0's interval metrics (``{"perf/...": value}``) and the window summary to a
:class:`MetricsRouter`. It calls ``on_log`` of every reporting integration callback the Trainer runs (TensorBoard,
W&B, MLflow, ...: those in ``transformers.integrations.INTEGRATION_TO_CALLBACK``), as ``Trainer.log`` does, but
without the console printers and without adding them to ``state.log_history``. Those integrations apply their own
naming (W&B shows ``perf/train/step_time_ms`` as ``train/perf/train/step_time_ms``), except TensorBoard: its
writer gets our tags as they are, the same tags as under Lightning and Accelerate (its ``on_log`` would prefix
``train/``). With no
integration configured (``report_to="none"``, the 5.x default) the metrics are written as TensorBoard events of our
own, under ``args.logging_dir`` where the Trainer still has one (4.x), else ``<output_dir>/<run>/tensorboard``.
An integration that raises turns the ``metrics`` writer off, and our own event file the ``events`` writer, each with
one warning (:class:`~perf_callbacks.core.files.outputs.Outputs`); training goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.integrations._events import EventFile


class MetricsRouter:
    """Sends metrics and text to the Trainer's reporting callbacks, or to our own TensorBoard events.

    Args:
        trainer: the ``transformers.Trainer`` (None when it could not be found: our own events then).
        args: its ``TrainingArguments``.
        state: its ``TrainerState`` (``global_step`` is read by the integrations).
        control: its ``TrainerControl``.
        log_dir: where our own events go when ``args`` has no ``logging_dir``.
        outputs: the run's writers (the engine's).
    """

    def __init__(self, trainer: Any, args: Any, state: Any, control: Any, log_dir: Path,
                 outputs: Outputs | None = None) -> None:
        self.args, self.state, self.control = args, state, control
        self.reporters = reporting_callbacks(trainer) if trainer is not None else []
        self.outputs = outputs or Outputs()
        self.events = EventFile(Path(getattr(args, "logging_dir", None) or log_dir), self.outputs)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Log on rank 0 (the adapter passes this only there) at ``step``.

        The integrations log at ``state.global_step``, so it reads ``step`` while they run: a window summary's
        scalars, published when its background analysis is done, land at the step after the window, not at
        whatever step training has reached by then.
        """
        if not self.reporters:
            self.events.scalars(metrics, step)
            return
        self.outputs.call("metrics", lambda: self._report(metrics, step))

    def _report(self, metrics: dict[str, float], step: int) -> None:
        now, self.state.global_step = self.state.global_step, step
        try:
            for callback in self.reporters:
                if not _tensorboard_scalars(callback, self.args, metrics, step):
                    callback.on_log(self.args, self.state, self.control, logs=dict(metrics))
        finally:
            self.state.global_step = now

    def log_text(self, tag: str, text: str, step: int) -> None:
        """The window summary: to the TensorBoard integration's writer, or to ours when nothing is configured."""
        if not self.reporters:
            self.events.text(tag, text, step)
            return
        def write(writer: Any) -> None:
            writer.add_text(tag, text, global_step=step)

        self.outputs.call("metrics", lambda: [_tensorboard(cb, self.args, write) for cb in self.reporters])

    def close(self) -> None:
        """Close our own event file (nothing is buffered)."""
        self.events.close()


def reporting_callbacks(trainer: Any) -> list[Any]:
    """The Trainer's ``report_to`` integration callbacks (and subclasses of them), in the Trainer's order."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    classes = tuple(INTEGRATION_TO_CALLBACK.values())
    return [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, classes)]


def _tensorboard_scalars(callback: Any, args: Any, metrics: dict[str, float], step: int) -> bool:
    """Our tags as they are to TensorBoard's writer (its ``on_log`` prefixes ``train/``); False: not TensorBoard."""

    def write(writer: Any) -> None:
        for tag, value in metrics.items():
            writer.add_scalar(tag, value, global_step=step)

    return _tensorboard(callback, args, write)


def _tensorboard(callback: Any, args: Any, write: Callable[[Any], None]) -> bool:
    """``write`` to TensorBoard's writer, then flush; False: ``callback`` is not TensorBoard's (or has no writer).

    The integration closes its writer at ``on_train_end``, before our last interval and summary: a writer is opened
    again for them (as its ``on_log`` does) and closed after, as the integration left it.
    """
    if not hasattr(callback, "tb_writer"):
        return False
    reopened = callback.tb_writer is None and hasattr(callback, "_init_summary_writer")
    if reopened:
        callback._init_summary_writer(args)
    writer = callback.tb_writer
    if writer is None:
        return False
    write(writer)
    writer.flush()
    if reopened:
        writer.close()
        callback.tb_writer = None
    return True

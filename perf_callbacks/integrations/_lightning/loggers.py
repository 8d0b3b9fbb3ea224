"""The Trainer's loggers: where the engine's metrics and window summary go, and our folder next to their logs."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.loggers import TensorBoardLogger

from perf_callbacks.core.context import MetricsFn, TextFn
from perf_callbacks.core.files.remote import join_output


def metrics_sink(trainer: pl.Trainer) -> MetricsFn:
    """``log_metrics(metrics, step)`` on every logger of ``trainer`` (those it has when the sink is called)."""

    def log_metrics(metrics: dict[str, float], step: int) -> None:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)

    return log_metrics


def text_sink(trainer: pl.Trainer) -> TextFn:
    """``add_text(tag, text, step)`` on the writer of every ``TensorBoardLogger`` of ``trainer``."""

    def log_text(tag: str, text: str, step: int) -> None:
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_text(tag, text, global_step=step)

    return log_text


def default_output_dir(trainer: pl.Trainer) -> str | Path:
    """``perf`` under the loggers' ``log_dir``, else under ``default_root_dir``; a remote logger's URL stays a URL."""
    log_dir = trainer.log_dir if trainer.loggers else None
    return join_output(log_dir or trainer.default_root_dir, "perf")

"""Cross-rank memory and timing logs for the Accelerate adapter: gathered from every rank, logged by rank 0.

The engine hands each rank's interval metrics to :meth:`CrossRankLogger.stash`. The adapter calls
:meth:`CrossRankLogger.flush` on *every* rank at the same optimizer step (a step boundary that is a multiple of
``log_every_n_steps``), whether or not that rank had anything to log, so the collective can never be entered by one
rank alone. Rank 0 then logs the cross-rank max and mean through ``accelerator.log`` when a tracker is configured, or
writes TensorBoard events itself under ``<run>/tensorboard``.

An interval that no step boundary flushed (the loop ``break``s right after a logging step) is sent at a clean close by
:meth:`CrossRankLogger.flush_at_close`: with several processes through the process group's key-value store, never a
collective, and rank 0 waits for the others at most ``CLOSE_WAIT_S``, so a rank that failed holds nobody.

Rank 0's writes go through the run's :class:`~perf_callbacks.core.files.outputs.Outputs`: a tracker that raises turns
the ``metrics`` writer off, our own event file the ``events`` writer, each with one warning; every rank still joins the
gather, so a rank whose writer is off holds nobody either.

Example:
    >>> reduce_across_ranks([{"perf/a": 1.0}, {"perf/a": 3.0, "perf/b": 2.0}], world_size=2)
    {'perf/a/max': 3.0, 'perf/a/mean': 2.0, 'perf/b/max': 2.0, 'perf/b/mean': 2.0}
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.integrations._events import EventFile

log = logging.getLogger(__name__)
CLOSE_WAIT_S = 10.0  # how long rank 0 waits at close for the other ranks' last interval


class CrossRankLogger:
    """Collects one rank's metrics and logs the cross-rank reduction on the main process.

    Args:
        accelerator: the ``accelerate.Accelerator`` of the run.
        log_dir: where to write TensorBoard events when the accelerator has no tracker.
        outputs: the run's writers (the engine's).
    """

    def __init__(self, accelerator: Any, log_dir: Path, outputs: Outputs | None = None) -> None:
        self.accelerator, self.outputs = accelerator, outputs or Outputs()
        self.events = EventFile(log_dir, self.outputs)
        self.pending: dict[str, float] = {}

    def stash(self, metrics: dict[str, float], step: int) -> None:
        """Keep this rank's metrics of the interval (the engine calls it on every rank, no collective)."""
        self.pending = dict(metrics)

    def flush(self, step: int) -> None:
        """Gather every rank's stashed metrics and log max/mean on rank 0. Every rank must call it at ``step``."""
        from accelerate.utils import gather_object

        acc = self.accelerator
        pending, self.pending = self.pending, {}
        gathered = gather_object([pending]) if acc.num_processes > 1 else [pending]  # key sets may differ by rank
        if acc.is_main_process:
            self.log_local(reduce_across_ranks(gathered, acc.num_processes), step)

    def flush_at_close(self, step: int, run: str) -> None:
        """Log the interval stashed at ``step`` that no step boundary flushed; call it at a clean close only.

        Each rank posts its metrics to the store under ``run``; rank 0 waits at most ``CLOSE_WAIT_S`` for all of them
        and logs nothing when one is missing (a rank that failed or closed elsewhere). No collective: nobody hangs.
        """
        acc = self.accelerator
        if acc.num_processes == 1:
            self.flush(step)
            return
        pending, self.pending = self.pending, {}
        try:
            from torch.distributed.distributed_c10d import _get_default_store

            store = _get_default_store()
            keys = [f"perf_callbacks/{run}/close/{step}/{rank}" for rank in range(acc.num_processes)]
            store.set(keys[acc.process_index], json.dumps(pending))
            if acc.is_main_process:
                store.wait(keys, timedelta(seconds=CLOSE_WAIT_S))
                gathered = [json.loads(store.get(key)) for key in keys]
                self.log_local(reduce_across_ranks(gathered, acc.num_processes), step)
        except Exception as err:  # noqa: BLE001 - a missing rank or no store: the last interval is not logged
            log.info("perf-callbacks: the metrics of steps up to %d were not logged at close (%s: %s)", step,
                     type(err).__name__, err)

    def log_local(self, values: dict[str, float], step: int) -> None:
        """Log from this process only (no collective); does nothing off the main process."""
        acc = self.accelerator
        if not acc.is_main_process or not values:
            return
        if acc.trackers:
            self.outputs.call("metrics", lambda: acc.log(values, step=step))
        else:
            self.events.scalars(values, step)

    def log_text(self, tag: str, text: str, step: int) -> None:
        """Log the window summary to the TensorBoard tracker, or to our own events when there is no tracker."""
        trackers = self.accelerator.trackers
        if not trackers:
            self.events.text(tag, text, step)
            return
        tb = next((t for t in trackers if t.name == "tensorboard"), None)
        if tb is not None:
            self.outputs.call("metrics", lambda: tb.writer.add_text(tag, text, global_step=step))

    def close(self) -> None:
        """Close our own event file (nothing is buffered; kept for symmetry with the trackers)."""
        self.events.close()


def reduce_across_ranks(gathered: list[dict[str, float]], world_size: int) -> dict[str, float]:
    """Per key, the max and mean over the ranks that reported it; plain values on a single process."""
    keys = sorted({k for metrics in gathered for k in metrics})
    if world_size == 1:
        return {k: float(gathered[0][k]) for k in keys}
    out = {}
    for k in keys:
        values = [float(m[k]) for m in gathered if k in m]
        out[f"{k}/max"], out[f"{k}/mean"] = max(values), sum(values) / len(values)
    return out

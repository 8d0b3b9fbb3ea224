"""Memory beyond the interval samples: per-phase peaks, allocator history and out-of-memory evidence.

The engine calls :meth:`MemoryWatch.phase` only while a step is armed for per-phase peaks (one step per logging
interval, on CUDA), :meth:`step_begins` only when ``memory_history_start`` is set, and everything else at logging
steps, window boundaries and the end of training, so the hot path is unchanged when these are off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.core.memory.oom import OOMForensics, batch_from_traceback
from perf_callbacks.core.memory.phase_peaks import FIRST_STEP, PhasePeaks
from perf_callbacks.core.memory.sampler import OutOfMemoryError

log = logging.getLogger(__name__)


class MemoryWatch:
    """Per-phase peaks of one step per logging interval, ``memory_history`` recording, and the OOM folder.

    Args:
        config: ``memory``, ``memory_history`` and ``memory_history_start`` are used.
        rank: global rank.
        device: this rank's device (None or CPU: host-side numbers only, no peaks, no history).
        run_dir: the run folder; OOM evidence goes to ``run_dir/oom-rank{R}``.
        warn: ``warn(message)``, the engine's warn-once for this instrument.
        outputs: the run's writers (``snapshots`` and ``oom``).
    """

    def __init__(self, config: PerfConfig, rank: int, device: torch.device | None, run_dir: Path,
                 warn: Callable[[str], None], outputs: Outputs | None = None) -> None:
        self.peaks = PhasePeaks.for_device(device) if config.memory else None
        self.oom = OOMForensics(config.memory_history, rank, run_dir, device, self.peaks, config.memory_history_start,
                                outputs)
        self.armed = False  # a step is being measured: the engine reports its phase boundaries
        self.history_at = config.memory_history_start if self.oom.wants_step_hook else None
        self._failed_at: tuple[BaseException, int | None, str] | None = None
        if self.peaks is not None:
            self._arm(FIRST_STEP)
        if config.memory_history and (device is None or device.type != "cuda"):
            warn(f"memory_history={config.memory_history} records the CUDA caching allocator; this run has no CUDA "
                 "device, so no snapshot.pickle is written (out-of-memory summaries still are)")

    def phase(self, name: str, step: int | None) -> None:
        """Phase ``name`` begins in ``step`` while a step is armed."""
        peaks = self.peaks
        if peaks is None or (peaks.armed not in (None, FIRST_STEP) and step is not None and step < peaks.armed):
            return  # the tail of the step before the armed one
        try:
            if peaks.boundary(name, step):
                self.armed = False
        except Exception as err:  # noqa: BLE001 - never harm training
            self.peaks, self.armed = None, False
            log.warning("perf-callbacks: per-phase peak memory disabled (%s: %s)", type(err).__name__, err)

    def step_begins(self, step: int) -> None:
        """Start allocator history at ``memory_history_start``."""
        if self.history_at is not None and step >= self.history_at:
            self.history_at = None
            self.oom.start_history(step)

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Add the last measured step's phase peaks to an interval's metrics; measure the next step."""
        if self.peaks is not None:
            metrics.update(self.peaks.metrics(metrics))
            self._arm(step)

    def headline(self) -> str | None:
        """``peak in backward: 31.2 of 80 GB (step 40)``, or None."""
        return self.peaks.headline() if self.peaks is not None else None

    def note_failure(self, exc: BaseException, step: int | None, phase: str | None) -> None:
        """Remember where ``exc`` left (phases are closed before the engine's close runs)."""
        if self._failed_at is None or self._failed_at[0] is not exc:
            self._failed_at = (exc, step, phase or "unknown")

    def on_exception(self, exc: BaseException, step: int | None, phase: str | None, batch: Any) -> None:
        """Write ``oom-rank{R}/`` for an out-of-memory error; nothing for any other exception. Never raises."""
        if not isinstance(exc, OutOfMemoryError):
            return
        failed = self._failed_at
        if failed is not None and failed[0] is exc:
            step, phase = failed[1], failed[2]
        self.oom.on_oom(exc, step, phase, batch if batch is not None else batch_from_traceback(exc))

    def _arm(self, step: int) -> None:
        if self.peaks is not None:
            self.peaks.arm(step)
            self.armed = True

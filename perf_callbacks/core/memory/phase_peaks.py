"""Peak memory by phase (forward, backward, optimizer step), measured on one step per logging interval.

The engine arms :class:`PhasePeaks` at each logging step; the next optimizer step is then measured: at every phase
boundary of that step the device's peak-allocated counter is read and reset, so each phase gets its own peak. Every
other step runs exactly as before (the engine swaps its ``phase`` method only for the measured step). The result is
logged with the next interval's memory metrics as ``memory/peak_{forward,backward,optimizer_step}_mb``.

Resetting the counter would hide the interval's earlier peak from
:class:`~perf_callbacks.core.memory.sampler.MemorySampler`, so every value read before a reset is carried and merged
back into ``memory/peak_allocated_mb`` at the next log.

CUDA only: the CPU allocator keeps no peak counter, and the host RSS high-water mark cannot separate phases (freed
memory stays resident), so CPU runs get no per-phase peaks.

Example:
    >>> readings = iter([0, 10 * 2**20, 30 * 2**20, 20 * 2**20, 5 * 2**20])
    >>> peaks = PhasePeaks(read_and_reset=lambda: next(readings))
    >>> peaks.arm(7)
    >>> for name in ("data_wait", "forward", "backward", "optimizer_step"):
    ...     _ = peaks.boundary(name, 7)
    >>> peaks.boundary("data_wait", 8)
    True
    >>> peaks.metrics()
    {'memory/peak_forward_mb': 30.0, 'memory/peak_backward_mb': 20.0, 'memory/peak_optimizer_step_mb': 5.0}
"""

from __future__ import annotations

from collections.abc import Callable

import torch

PHASES = ("forward", "backward", "optimizer_step")
FIRST_STEP = -1  # ``arm(FIRST_STEP)``: measure whichever step is open at the next boundary (the run's first step)
_MB = 1024.0 * 1024.0


class PhasePeaks:
    """Per-phase peak allocated memory of one armed step at a time.

    Args:
        read_and_reset: returns the peak allocated bytes since the last call and resets the counter.
        total_bytes: the device's total memory, for "peak in backward: 31.2 of 80 GB"; None if unknown.
    """

    def __init__(self, read_and_reset: Callable[[], int], total_bytes: int | None = None) -> None:
        self._read = read_and_reset
        self.total_bytes = total_bytes
        self.armed: int | None = None
        self.step: int | None = None  # the step that ``last`` describes
        self.last: dict[str, float] = {}  # phase -> peak MB of the last measured step
        self._current: str | None = None
        self._measuring: dict[str, float] = {}
        self._carry = 0.0  # largest value read (MB) since the last ``metrics()``

    @classmethod
    def for_device(cls, device: torch.device | None) -> PhasePeaks | None:
        """The CUDA reader for ``device``, or None where there is no peak counter (CPU)."""
        if device is None or device.type != "cuda":
            return None

        def read_and_reset() -> int:
            stats = torch.cuda.memory_stats_as_nested_dict(device)
            torch.cuda.reset_peak_memory_stats(device)
            return int(stats.get("allocated_bytes", {}).get("all", {}).get("peak", 0))

        return cls(read_and_reset, int(torch.cuda.get_device_properties(device).total_memory))

    def arm(self, step: int) -> None:
        """Measure optimizer step ``step`` (the counter is reset at its first phase boundary)."""
        self.armed, self._current, self._measuring = step, None, {}

    def boundary(self, name: str, open_step: int | None) -> bool:
        """Phase ``name`` starts while step ``open_step`` is open; returns True once the armed step is over."""
        mb = self._read() / _MB
        self._carry = max(self._carry, mb)
        if self.armed == FIRST_STEP:
            if open_step is None:  # e.g. validation before the first batch: wait for a training step
                return False
            self.armed = open_step
        if self._current in PHASES:  # micro-batches: a phase seen twice keeps its largest peak
            self._measuring[self._current] = max(self._measuring.get(self._current, 0.0), mb)
        if open_step != self.armed:
            self.step, self.last, self.armed = self.armed, dict(self._measuring), None
            return True
        self._current = name
        return False

    def metrics(self, logged: dict[str, float] | None = None) -> dict[str, float]:
        """``memory/peak_<phase>_mb`` of the last measured step; merges the carried peak into ``logged``."""
        if logged is not None and "memory/peak_allocated_mb" in logged:
            logged["memory/peak_allocated_mb"] = max(logged["memory/peak_allocated_mb"], self._carry)
        self._carry = 0.0
        return {f"memory/peak_{name}_mb": mb for name, mb in self.last.items()}

    def headline(self) -> str | None:
        """``peak in backward: 31.2 of 80 GB`` for the largest phase of the last measured step, or None."""
        if not self.last:
            return None
        name, mb = max(self.last.items(), key=lambda kv: kv[1])
        total = f" of {self.total_bytes / 1e9:.0f} GB" if self.total_bytes else " GB"
        return f"peak in {name}: {mb * _MB / 1e9:.1f}{total} (step {self.step})"

"""NVTX ranges for training steps and phases, through the ``nvtx`` package's domain API.

Event attributes are built once and cached, so a push/pop pair costs about 0.1 us. Without an attached tool
(Nsight Systems, Nsight Compute, an injection library) ``nvtx`` hands out a no-op domain; without the package, or on
any failure, the ranges become no-ops. ``torch.cuda.nvtx`` is not used: it raises on CPU-only builds and sends
unregistered strings that ``nsys --capture-range=nvtx`` ignores by default.

The step range carries its step number as the NVTX payload (message ``step``, payload ``N``): a registered string per
step would grow without bound over a long run.

Example:
    >>> ranges = NvtxRanges("perf_callbacks")
    >>> ranges.push_step(7); ranges.push("forward"); ranges.pop(); ranges.pop()
    >>> ranges.depth
    0
"""

from __future__ import annotations

import logging
from typing import Any

from perf_callbacks.core.warn import warn_user
from perf_callbacks.exceptions import InstrumentUnavailableWarning

log = logging.getLogger(__name__)

STEP = "step"
#: phase name -> (colour, category). Categories group ranges in Nsight Systems' timeline.
PHASES: dict[str, tuple[str, str]] = {
    "data_wait": ("red", "data"),
    "forward": ("green", "compute"),
    "backward": ("blue", "compute"),
    "optimizer_step": ("purple", "compute"),
    "validation": ("yellow", "eval"),
    "checkpoint": ("orange", "io"),
    "module": ("cyan", "module"),
}


class NvtxRanges:
    """Balanced NVTX ranges in one named domain; disables itself (warning once) if NVTX fails.

    Args:
        domain: the NVTX domain name.
        enabled: when False every call is a no-op.
    """

    def __init__(self, domain: str = "perf_callbacks", enabled: bool = True) -> None:
        self.domain_name = domain
        self.depth = 0
        self._domain: Any = None
        self._attrs: dict[tuple[str, str | None], Any] = {}
        self._step_color = "darkgreen"
        if enabled:
            self._setup(domain)

    @property
    def enabled(self) -> bool:
        """Whether ranges are being emitted."""
        return self._domain is not None

    def attributes(self, message: str, category: str | None = None, color: str | int | None = None) -> Any:
        """Cached event attributes for ``message``; phase names get their own colour and category."""
        key = (message, category)
        attrs = self._attrs.get(key)
        if attrs is None:
            default_color, default_category = PHASES.get(message, ("white", "other"))
            attrs = self._attrs[key] = self._domain.get_event_attributes(
                message=message, color=color if color is not None else default_color,
                category=category or default_category,
            )
        return attrs

    def push_step(self, step: int) -> None:
        """Open the range of optimizer step ``step`` (message ``step``, payload ``step``)."""
        if self._domain is None:
            return
        try:
            attrs = self._domain.get_event_attributes(
                message=STEP, color=self._step_color, category=STEP, payload=int(step)
            )
            self._domain.push_range(attrs)
            self.depth += 1
        except Exception as err:  # noqa: BLE001 - never harm training
            self._disable(err)

    def push(self, phase: str) -> None:
        """Open a phase range (``data_wait``, ``forward``, ``backward``, ``optimizer_step``, ...) or any name."""
        if self._domain is None:
            return
        try:
            self._domain.push_range(self.attributes(phase))
            self.depth += 1
        except Exception as err:  # noqa: BLE001
            self._disable(err)

    def pop(self) -> None:
        """Close the innermost open range; a no-op when none is open."""
        if self._domain is None or self.depth == 0:
            return
        try:
            self._domain.pop_range()
            self.depth -= 1
        except Exception as err:  # noqa: BLE001
            self._disable(err)

    def pop_all(self) -> None:
        """Close every open range, e.g. when an exception unwinds the training loop."""
        while self.depth > 0 and self._domain is not None:
            self.pop()

    def _setup(self, domain: str) -> None:
        try:
            import nvtx

            self._domain = nvtx.get_domain(domain)
            if type(self._domain).__name__ == "DummyDomain":  # no tool attached (fixed at process start): no-op
                self._domain = None
                return
            for phase in PHASES:
                self.attributes(phase)
        except Exception as err:  # noqa: BLE001
            self._disable(err)

    def _disable(self, err: BaseException) -> None:
        self._domain = None
        self.depth = 0
        warn_user(f"NVTX ranges disabled: {type(err).__name__}: {err}. Training continues without them.",
                  InstrumentUnavailableWarning)

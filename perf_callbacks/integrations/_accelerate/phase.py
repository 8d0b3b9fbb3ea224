"""A named phase range of the Accelerate hook (``hook.phase(name)``, the backward wrapper's), ended on any exit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perf_callbacks.core.memory.sampler import OutOfMemoryError

if TYPE_CHECKING:
    from perf_callbacks.core.engine.engine import PerfEngine
    from perf_callbacks.integrations._accelerate.steps import StepCounting


class Phase:
    """``hook.phase(name)``: a context manager without a generator (the backward wrapper enters one every step).

    Args:
        hook: the hook whose step holds the phase (a step is opened at its first phase when ``hook.iter`` is not used).
        name: the phase's name.
    """

    __slots__ = ("engine", "hook", "name")

    def __init__(self, hook: StepCounting, name: str) -> None:
        self.hook, self.name = hook, name
        self.engine: PerfEngine | None = None

    def __enter__(self) -> None:
        self.engine = engine = self.hook._open_engine()
        if engine is not None:
            engine.phase(self.name)

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: object) -> None:
        engine = self.engine
        if engine is None:
            return
        if isinstance(err, OutOfMemoryError):  # the out-of-memory summary names the phase, closed below
            engine.note_failure(err)
        if not self.hook._closed:
            engine.end_phase()

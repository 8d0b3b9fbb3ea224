"""A resumed run's redone steps: the steps the earlier run reached past the checkpoint this run resumed from.

A run resumed from a checkpoint starts at the step count the checkpoint holds (its first step in the step record is
not 0). The earlier run is the latest other run folder next to this one (the same ``output_dir``, ``MAX_RUNS`` read
at most) whose record of the same rank was last written before this run started, began before that step and reached
it: the steps it completed from there on were done again by this run, and their time in it (steps and the time set
aside in them) was lost. An earlier run that did not close (killed) may have completed steps its record never
received: the count is then a lower bound (``closed``: false). No such run: nothing is said.

Example:
    >>> from perf_callbacks.analysis.diff.steps import StepRecord
    >>> earlier = StepRecord(0, [0, 1, 2, 3, 4, 5, 6], [0.1] * 7, [8] * 7, [0.0] * 7, [0.0] * 7, [0] * 7,
    ...                      {"ledger": {"close_s": 1.0}})
    >>> r = redone_steps(4, earlier, "20261207-101500-ab12cd")
    >>> r.at_step, r.reached, r.steps, round(r.seconds, 3), r.closed
    (4, 6, 3, 0.3, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.diff.steps import StepRecord, read_record

__all__ = ["MAX_RUNS", "Resumed", "find_resumed", "redone_steps"]
MAX_RUNS = 8  # earlier runs read at most, the latest first


@dataclass(frozen=True)
class Resumed:
    """A run resumed at ``at_step``; the earlier run ``run`` reached step ``reached``.

    Attributes:
        at_step: the first step of this run (the count its checkpoint held).
        run: the earlier run's folder name.
        reached: the last step the earlier run's record holds (-1: none).
        steps: steps done again by this run: ``reached + 1 - at_step``, at least 0.
        seconds: their time in the earlier run (step time and time set aside in those steps).
        closed: the earlier run closed (else its last steps may be missing from its record: ``steps`` is at least).
    """

    at_step: int
    run: str
    reached: int
    steps: int
    seconds: float
    closed: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON, the attributes by name."""
        return {"at_step": self.at_step, "run": self.run, "reached": self.reached, "redone_steps": self.steps,
                "redone_s": round(self.seconds, 4), "closed": self.closed}

    def text(self) -> str:
        """``resumed at step 8: 3 steps (1.2 s) redone since the checkpoint (run 20261207-...)``."""
        if self.steps <= 0:
            return f"resumed at step {self.at_step}: no step redone (run {self.run} reached step {self.reached})"
        least = "" if self.closed else "at least "
        return (f"resumed at step {self.at_step}: {least}{self.steps} step{'s' if self.steps != 1 else ''} "
                f"({self.seconds:.3g} s) redone since the checkpoint (run {self.run} reached step {self.reached})")


def redone_steps(at_step: int, earlier: StepRecord, run: str) -> Resumed | None:
    """What ``earlier`` (named ``run``) did from ``at_step`` on; None when it could not have written that checkpoint.

    It began before ``at_step`` and completed at least the steps before it (else it is another run in the folder).
    """
    steps = [int(s) for s in earlier.step]
    led: dict[str, Any] = earlier.meta["ledger"] if isinstance(earlier.meta.get("ledger"), dict) else {}
    opened = led.get("open_step") if isinstance(led.get("open_step"), dict) else None
    last = max(steps, default=-1)
    extra = opened if opened is not None and opened.get("ended") and int(opened.get("step", -1)) > last else None
    reached = int(extra["step"]) if extra is not None else last
    first = min(steps) if steps else reached
    if reached + 1 < at_step or first >= at_step:  # it never reached the checkpoint, or began past it
        return None
    seconds = sum(earlier.time_s[i] + earlier.aside_s[i] for i, s in enumerate(steps) if s >= at_step)
    if extra is not None and reached >= at_step:
        seconds += float(extra.get("elapsed_s", 0.0))
    return Resumed(at_step, run, reached, max(reached + 1 - at_step, 0), seconds, "close_s" in led)


def find_resumed(record: StepRecord) -> Resumed | None:
    """The redone steps of ``record``'s run, if it resumed (its first step is not 0) and the run before is beside it."""
    if not record.step or int(record.step[0]) <= 0 or not record.path:
        return None
    here = Path(record.path)
    try:
        started = here.with_suffix(".json").stat().st_mtime - float(record.meta.get("wall_s", 0.0))
    except OSError:
        return None
    earlier: list[tuple[float, Path]] = []
    for other in here.parent.parent.glob(f"*/{here.name}"):
        try:
            written = other.with_suffix(".json").stat().st_mtime
        except OSError:
            continue
        if other.parent != here.parent and written <= started:
            earlier.append((written, other))
    for _, other in sorted(earlier, reverse=True)[:MAX_RUNS]:  # the latest first
        try:
            found = redone_steps(int(record.step[0]), read_record(other), other.parent.name)
        except (OSError, ValueError):
            continue
        if found is not None:
            return found
    return None

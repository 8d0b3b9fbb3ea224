"""Every file perf-callbacks writes, and every metric it hands to a logger, goes through one guard per run.

The writers: ``traces`` (the profiler's windows), ``events`` (our own TensorBoard event file), ``summaries``
(``summary.txt``), ``sidecars`` (``rank{R}.summary.json``), ``snapshots`` (allocator snapshots), ``oom`` (the
``oom-rank{R}/`` folder), ``state`` (the Accelerate step count next to a checkpoint), ``uploads`` (to a remote
``output_dir``, see ``remote.py``) and ``metrics`` (the framework's
loggers and trackers, which write files of their own). The first failure of a writer turns that writer off for the
rest of the run with one :class:`~perf_callbacks.InstrumentUnavailableWarning` that names the cause (errno and path,
e.g. ``No space left on device (ENOSPC): /out/run/window-000006-000007/.rank0.raw.partial``), removes what the
failed write left behind, and training goes on. Nothing here touches the file system until a writer writes: the hot
path is unchanged.

Example:
    >>> import errno, warnings
    >>> outputs = Outputs()
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     outputs.failed("events", OSError(errno.ENOSPC, "No space left on device"), "/out/events")
    >>> print(seen[0].message)
    perf-callbacks: TensorBoard events disabled: No space left on device (ENOSPC): /out/events; training continues
    >>> outputs.enabled("events"), outputs.call("events", lambda: 1), outputs.call("traces", lambda: 2)
    (False, None, 2)
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from perf_callbacks._errors import describe_error
from perf_callbacks.core.warn import WarnFn, WarnOnce
from perf_callbacks.exceptions import InstrumentUnavailableWarning

__all__ = ["WRITERS", "Outputs", "describe_error", "make_dirs", "remove_empty"]
log = logging.getLogger(__name__)
T = TypeVar("T")

WRITERS: dict[str, tuple[str, str]] = {  # writer: (what is disabled, what goes on)
    "traces": ("profiler disabled", "training continues"),
    "events": ("TensorBoard events disabled", "training continues"),
    "metrics": ("metrics disabled", "training continues"),
    "summaries": ("summary.txt files disabled", "window summaries are still printed; training continues"),
    "pages": ("the run's report.html disabled", "summary.txt files are still written; training continues"),
    "sidecars": ("window summaries disabled", "traces are still written; training continues"),
    "snapshots": ("allocator snapshots disabled", "traces are still written; training continues"),
    "oom": ("out-of-memory evidence not written", "its summary is printed to stderr"),
    "state": ("the step count is no longer saved next to checkpoints",
              "it still travels in the optimizer state; training continues"),
    "uploads": ("uploads disabled", "training continues"),
}


class Outputs:
    """Which of one rank's writers still work; the first failure of each is warned about once, on every rank.

    Args:
        warn: ``warn(key, category, message, main_only)``, the engine's warn-once (default: a warn-once of its own).
        rank: global rank, named in the warning when ``world_size > 1``.
        world_size: number of ranks.
    """

    def __init__(self, warn: WarnFn | None = None, rank: int = 0, world_size: int = 1) -> None:
        self._warn: WarnFn = warn if warn is not None else WarnOnce(is_main=True)
        self.rank_note = f" on rank {rank}" if world_size > 1 else ""
        self.off: dict[str, str] = {}  # writer -> the cause that turned it off

    def enabled(self, writer: str) -> bool:
        """The writer has not failed yet."""
        return writer not in self.off

    def failed(self, writer: str, error: BaseException | str, path: str | os.PathLike[str] | None = None,
               cleanup: Iterable[Path] = ()) -> None:
        """Turn ``writer`` off: remove ``cleanup`` (what the failed write left) and warn once with the cause.

        ``error`` is the exception (described with its errno and ``path``), or a description made elsewhere (the
        analysis process).
        """
        for leftover in cleanup:
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)
        cause = error if isinstance(error, str) else describe_error(error, path)
        if writer in self.off:
            log.debug("perf-callbacks: %s failed again: %s", writer, cause)
            return
        self.off[writer] = cause
        what, after = WRITERS[writer]
        self._warn(f"disabled:{writer}", InstrumentUnavailableWarning, f"{what}{self.rank_note}: {cause}; {after}",
                   False)

    def call(self, writer: str, fn: Callable[[], T], path: str | os.PathLike[str] | None = None) -> T | None:
        """``fn()`` unless ``writer`` is off; an exception turns it off (see :meth:`failed`) and gives None."""
        if writer in self.off:
            return None
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - a failing output never reaches training
            self.failed(writer, err, path)
            return None


def make_dirs(folder: Path) -> list[Path]:
    """``mkdir -p folder``; returns the folders it created, deepest first (see :func:`remove_empty`)."""
    missing, parent = [], folder
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def remove_empty(folders: Iterable[Path]) -> None:
    """Remove the folders a failed write created, deepest first, as long as they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return

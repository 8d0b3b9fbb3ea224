"""Facts about the distributed run that every adapter checks the same way.

Example:
    >>> check_ranks([0, 1], world_size=2)
    >>> check_ranks(None, world_size=1)
    >>> check_ranks([1], world_size=1)
    Traceback (most recent call last):
    ...
    perf_callbacks.exceptions.PerfConfigError: ranks=[1] names ranks beyond the world size 1; valid ranks are 0-0
"""

from __future__ import annotations

from collections.abc import Sequence

from perf_callbacks.exceptions import PerfConfigError


def check_ranks(ranks: Sequence[int] | None, world_size: int | None = None) -> None:
    """Raise :class:`PerfConfigError` unless ``ranks`` is None or distinct global ranks >= 0, below ``world_size``.

    The one check of ``ranks``: :class:`~perf_callbacks.PerfConfig` calls it at construction (no world size yet), and
    every adapter again when it learns the world size, before the first training step.
    """
    if ranks is None:
        return
    if not ranks:
        raise PerfConfigError(
            "ranks must be a non-empty list of global ranks >= 0, got []; omit ranks (or set it to null) to profile "
            "all ranks"
        )
    if any(r < 0 for r in ranks):
        raise PerfConfigError(f"ranks must be global ranks >= 0, got {list(ranks)}")
    twice = sorted({r for r in ranks if list(ranks).count(r) > 1})
    if twice:
        raise PerfConfigError(f"ranks must list each global rank once, got {list(ranks)} (repeated: {twice})")
    if world_size is not None and max(ranks) >= world_size:
        raise PerfConfigError(
            f"ranks={list(ranks)} names ranks beyond the world size {world_size}; "
            f"valid ranks are 0-{world_size - 1}"
        )

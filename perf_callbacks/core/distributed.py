"""Facts about the distributed run that every adapter checks the same way.

Example:
    >>> check_ranks([0, 1], world_size=2)
    >>> check_ranks(None, world_size=1)
"""

from __future__ import annotations

from collections.abc import Sequence

from perf_callbacks.exceptions import PerfConfigError


def check_ranks(ranks: Sequence[int] | None, world_size: int) -> None:
    """Raise :class:`PerfConfigError` when ``ranks`` names a global rank beyond ``world_size``.

    Adapters call it when they learn the world size, before the first training step.
    """
    if ranks is not None and ranks and max(ranks) >= world_size:
        raise PerfConfigError(
            f"ranks={list(ranks)} names ranks beyond the world size {world_size}; "
            f"valid ranks are 0-{world_size - 1}"
        )

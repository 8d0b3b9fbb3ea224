"""``check_ranks``: the one check of ``ranks``, in the config and in every adapter (each adapter's test uses ranks=[1]
on one process, the boundary)."""

from __future__ import annotations

import pytest

from perf_callbacks.config import PerfConfig, check_ranks
from perf_callbacks.exceptions import PerfConfigError


def test_the_last_rank_is_world_size_minus_one() -> None:
    check_ranks([0], world_size=1)
    check_ranks([1], world_size=2)
    check_ranks([3, 0], world_size=4)
    for ranks, world_size in (([1], 1), ([0, 2], 2), ([4], 4)):
        with pytest.raises(PerfConfigError, match=rf"names ranks beyond the world size {world_size}; valid ranks are "
                                                  rf"0-{world_size - 1}"):
            check_ranks(ranks, world_size)


def test_without_a_world_size_only_the_values_are_checked() -> None:
    check_ranks(None)
    check_ranks(None, world_size=1)
    check_ranks([7])  # the config cannot know the world size: the adapter checks it when it does
    with pytest.raises(PerfConfigError, match=r"ranks must list each global rank once, got \[1, 1\]"):
        check_ranks([1, 1], world_size=8)
    assert PerfConfig(ranks=(7,)).ranks == (7,)
    with pytest.raises(PerfConfigError, match=r"ranks must be global ranks >= 0, got \[-1\]"):
        PerfConfig(ranks=(-1,))

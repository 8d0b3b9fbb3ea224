"""Shared advice: at most 8 loader workers, whatever the cores."""

from __future__ import annotations

from perf_callbacks.analysis.judge.advice import loader_fix, suggest_num_workers


def test_workers_are_the_cores_per_rank_up_to_eight() -> None:
    assert [suggest_num_workers(cores=c) for c in (0, 1, 7, 8, 9, 64)] == [1, 1, 7, 8, 8, 8]
    assert suggest_num_workers(local_world_size=1, cores=None) <= 8
    assert loader_fix(0, cores=64) == "try num_workers=8 (the CPU cores per local rank, up to 8)"

from __future__ import annotations

import itertools
import math

import pytest
import torch

from perf_callbacks.config import ScheduleConfig
from perf_callbacks.core.triggers.schedule import Action, Schedule


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
@pytest.mark.parametrize(
    ("wait", "warmup", "active", "repeat", "skip_first"),
    list(itertools.product([0, 2], [0, 1], [1, 3], [0, 1, 2], [0, 5])),
)
def test_matches_torch_profiler_schedule(wait: int, warmup: int, active: int, repeat: int, skip_first: int) -> None:
    ours = Schedule(ScheduleConfig(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first))
    theirs = torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)
    for step in range(60):
        assert ours.action(step).name == theirs(step).name, step


def test_window() -> None:
    s = Schedule(ScheduleConfig(wait=1, warmup=1, active=3, repeat=2, skip_first=10))
    recorded = [i for i in range(40) if s.action(i) in (Action.RECORD, Action.RECORD_AND_SAVE)]
    assert recorded == [12, 13, 14, 17, 18, 19]
    assert s.window(12) == s.window(14) == (12, 14)
    assert s.window(11) == (12, 14)
    assert s.window(18) == (17, 19)


def test_a_single_cycle_records_nothing_after_it() -> None:
    s = Schedule(ScheduleConfig(wait=1, warmup=1, active=2, repeat=1, skip_first=3))
    assert [s.action(i).name for i in range(3, 9)] == ["NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE", "NONE", "NONE"]
    assert s.action(100) is Action.NONE


@pytest.mark.parametrize(
    ("wait", "warmup", "active", "repeat", "skip_first"),
    list(itertools.product([0, 1, 3], [0, 2], [1, 3], [0, 1, 2], [0, 4])),
)
def test_next_active_is_the_first_step_with_an_action(
    wait: int, warmup: int, active: int, repeat: int, skip_first: int
) -> None:
    """What lets the engine skip the schedule until a window is due: never later than the first step that acts."""
    s = Schedule(ScheduleConfig(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first))
    for step in range(60):
        first = next((i for i in range(step, 120) if s.action(i) is not Action.NONE), math.inf)
        assert s.next_active(step) == first, step

"""The input loss a verdict rests on: the lower median step's, capped at the window's share, nothing under 1 ms."""

from __future__ import annotations

import pytest

from perf_callbacks.analysis.judge.evidence import input_evidence
from perf_callbacks.analysis.results.result import RankResult, StepResult
from perf_callbacks.analysis.trace.machine import load_of


def rank(inputs_ms: list[float], window_share: float, step_ms: float = 10.0) -> RankResult:
    """Steps of ``step_ms`` each, of which ``inputs_ms`` waited for input; the window's input share as given."""
    steps = [StepResult(n, step_ms, {"compute": step_ms - w, "input": w}) for n, w in enumerate(inputs_ms)]
    total = step_ms * len(steps)
    return RankResult(0, "t", total, None, None, step_ms, 0.5, {"input": window_share}, steps, {}, {}, [],
                      [], None, [], {}, None)


def test_two_steps_take_the_lower_median() -> None:
    """0.5 ms and 3 ms of wait: the lower one is the median step's, under the 1 ms floor (the mean, 1.75, is not)."""
    found = input_evidence(rank([0.5, 3.0], 0.175))
    assert (found.share, found.median_wait_ms, found.longest_wait_ms) == (0.0, 0.5, 3.0)
    found = input_evidence(rank([2.0, 6.0], 0.4))  # both over the floor: the lower median's share, 20%
    assert found.share == pytest.approx(0.2) and found.median_wait_ms == 2.0


def test_the_median_steps_share_is_capped_at_the_windows() -> None:
    """Steps that each wait 30% of their time, in a window whose input loss is 10% (time between the steps)."""
    found = input_evidence(rank([3.0, 3.0, 3.0], 0.1))
    assert (found.share, found.window_share) == (0.1, 0.1)
    assert input_evidence(rank([3.0, 3.0, 3.0], 0.5)).share == pytest.approx(0.3)  # the control: under the cap


def test_a_median_wait_of_exactly_1_ms_counts() -> None:
    """The floor is "under 1 ms": a median step that waited 1.0 ms is evidence, 0.99 ms is not."""
    assert input_evidence(rank([1.0, 1.0, 1.0], 0.1)).share == pytest.approx(0.1)
    assert input_evidence(rank([0.99, 0.99, 0.99], 0.1)).share == 0.0


SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def in_process(run_queue_ms: float, ran_ms: float, machine: dict | None = None, loader: str = SINGLE) -> RankResult:
    """Six 4 ms steps that each wait 2 ms for a batch the training thread fetches itself, with its measured load: of
    100 ms, ``run_queue_ms`` waiting for a CPU, ``ran_ms`` on one, the rest blocked."""
    r = rank([2.0] * 6, 0.5, step_ms=4.0)
    r.data_loader, r.machine = loader, {"num_workers": 0} if machine is None else machine
    r.load = load_of({"perf_callbacks_load": {"wall_ms": 100.0, "run_queue_ms": run_queue_ms, "ran_ms": ran_ms,
                                              "workers": 0, "workers_cpu_ms": None, "workers_run_queue_ms": None}})
    return r


def test_in_process_the_floor_applies_to_the_wait_less_its_wait_for_a_cpu() -> None:
    """20 ms of 100 blocked: 0.8 ms of the 2 ms fetch; of the other 1.2 ms, 70/80 waited for a CPU (1.05 ms, a
    52.5% contention): 0.95 ms of its own, under the floor. With 50/80, 1.25 ms of its own: 62.5% of the share stays."""
    busy = input_evidence(in_process(70.0, 10.0))
    assert busy.contention == pytest.approx(0.525) and busy.own_wait_ms == pytest.approx(0.95)
    assert busy.share == 0.0
    quieter = input_evidence(in_process(50.0, 30.0))
    assert quieter.contention == pytest.approx(0.375) and quieter.share == pytest.approx(0.5 * 0.625)


def test_without_num_workers_a_single_process_loader_is_in_process() -> None:
    """A trace of another tool says no ``num_workers``; its DataLoader's iterator says the fetch was in-process."""
    assert input_evidence(in_process(70.0, 10.0, machine={})).share == 0.0
    workers = input_evidence(in_process(70.0, 10.0, machine={},
                                        loader="enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"))
    assert workers.contention == 0.0 and workers.share == pytest.approx(0.5)  # with workers the thread is blocked

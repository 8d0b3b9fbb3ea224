"""A training thread kept waiting for a CPU is told so, and its slow fetches are no slow loader; a healthy run is not.

The review's case: on a loaded machine a fast in-memory ``TensorDataset`` window came out ``input_bound`` at 80% data
wait (``aten::as_strided`` took 18 us instead of 1): the main process was waiting for a CPU, not for data. Here the
test makes that load itself: it pins its training thread to one core and starts processes spinning on that core, so
the thread waits for the CPU most of the time whatever else runs on the machine. The window then shows the share in
time by cause and in its JSON, names ``cpu_contention`` as its verdict, and gives neither ``input_bound`` nor
``num_workers`` advice, and the live data-wait warning stays silent.

The healthy runs wait for their "device" (a sleep, in which a thread needs no CPU, so other processes cannot delay
it much), with a noisy step time and a fast loader: no contention verdict or advice, no loader advice or warning.
"""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from perf_callbacks.analysis.judge.verdict import THRESHOLD
from perf_callbacks.exceptions import DataLoaderWarning
from tests.integrations.loader_helpers import (
    CpuFetch,
    Fetching,
    Stepping,
    busy,
    cores,
    in_memory,
    on_a_busy_core,
    plain_loop,
    train,
)

SPINNERS = 3  # on the training thread's one core: it gets about a quarter of it
BURN_MS = 1.0  # CPU time a step of the sleeping loader's run spins: about half a second on the busy cores


def test_a_busy_core_is_cpu_contention_not_a_slow_loader(tmp_path: Path) -> None:
    with cores(1) as core, busy(core, SPINNERS):
        result = train(tmp_path, Stepping(in_memory(), 0, step_ms=0.0, batch_size=16), data_wait_steps=8)
    rank = result.ranks[0]
    assert rank.losses["cpu_contention"] >= 0.5, rank.losses  # the planted load: about 75%
    assert result.verdict == "cpu_contention", (result.verdict, result.verdict_note, rank.losses)
    assert result.recommendations[0].startswith("the training thread waited for a CPU"), result.recommendations
    assert not any("raise num_workers" in r or "try num_workers" in r for r in result.recommendations), \
        result.recommendations
    assert result.loader is not None and result.loader["advice_kind"] == "none", result.loader
    (summary,) = (tmp_path / "perf").glob("*/window-*/summary.txt")
    assert "; cpu_contention " in next(x for x in summary.read_text().splitlines() if x.startswith("time by cause:"))
    (sidecar,) = (tmp_path / "perf").glob("*/window-*/rank0.summary.json")
    data = json.loads(sidecar.read_text())
    assert data["verdict"] == "cpu_contention" and data["rank"]["losses"]["cpu_contention"] >= 0.5
    assert data["scalars"]["perf/window/cpu_contention_fraction"] >= 0.5


def test_the_reviews_case_a_fast_fetch_stretched_by_a_busy_core_is_no_slow_loader(tmp_path: Path) -> None:
    """The loop of the benchmarks: a fetch of 0.5 ms of CPU time, stretched to tens of ms by a busy core.

    Before, the window said ``input_bound`` ("try num_workers=1") and so did the live warning.
    """
    loader = DataLoader(CpuFetch(batch_ms=0.5, batch_size=32), batch_size=32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the model's ops on the busy core too, not waiting for pool threads on another
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            result = on_a_busy_core(lambda: plain_loop(tmp_path, loader, data_wait_steps=8))
    finally:
        torch.set_num_threads(threads)
    assert not [str(w.message) for w in seen if issubclass(w.category, DataLoaderWarning)]
    assert result.ranks[0].losses["cpu_contention"] >= 0.5, result.ranks[0].losses
    assert result.verdict == "cpu_contention", (result.verdict, result.verdict_note)
    # what made it input_bound before: a data wait above the verdict's 10% threshold. How much of the stretched loop
    # the fetch holds is not the test's to set: the thread runs in the slices the scheduler leaves it, and a fetch of
    # about 1 ms of CPU falls inside one or across several (2-50% of the window on this machine, one run to the next).
    # Where it crossed the threshold, the note says why it is no slow loader (either reason: its own part under 1 ms,
    # or a wall wait under 1 ms, as the machine's load decides); the assertions above and below hold in every run.
    if result.data_wait_fraction >= THRESHOLD:
        assert "not a slow loader" in result.verdict_note, (result.data_wait_fraction, result.verdict_note)
    assert not any("num_workers=1" in r for r in result.recommendations), result.recommendations
    assert result.loader is not None and result.loader["advice_kind"] == "none", result.loader


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_healthy_noisy_run_hears_no_contention_and_no_loader_advice(tmp_path: Path, num_workers: int) -> None:
    """Steps of 60-100 ms that wait for their "device" (a sleep) and need about 1 ms of CPU.

    On a machine busy enough that each wake-up waits for a core (neighbours at a load of 5.5 on 2 cores), such a loop
    waited for a CPU up to 29% of its window: measured and shown, under the bar where the verdict names it.
    """
    rng = random.Random(7)
    waits = [80.0 + rng.uniform(-20.0, 20.0) for _ in range(64)]
    loader = DataLoader(in_memory(), batch_size=16, num_workers=num_workers, persistent_workers=num_workers > 0)
    result = plain_loop(tmp_path, loader, waits_ms=waits, data_wait_steps=8)  # a DataLoaderWarning fails the test
    assert result.verdict not in ("cpu_contention", "input_bound"), (result.verdict, result.ranks[0].losses)
    assert not any("waited for a CPU" in r for r in result.recommendations), result.recommendations
    assert not any(more in r for more in ("raise num_workers", "try num_workers", "cannot help")
                   for r in result.recommendations), result.recommendations
    # on a busy machine, taking batches over from workers that kept well ahead can cost a few % of the step: said as
    # such from 5% (as every loss is), never as a slow loader
    assert result.loader is not None and result.loader["advice_kind"] in ("none", "handover"), result.loader
    assert "cpu_contention" in result.ranks[0].losses  # measured, and under the bar


@pytest.mark.slow
def test_a_loader_sleeping_in_process_on_a_busy_machine_keeps_its_advice_beside_the_contention(tmp_path: Path) -> None:
    """The issue's case: 10 ms of sleep per sample at ``num_workers=0`` on a busy machine got ``advice: none``.

    Here the test makes the load: its thread (at nice 10) on 2 cores that 3 spinners keep busy, each step spinning
    ``BURN_MS`` of CPU time (stretched by the busy cores) and fetching 4 samples that sleep 10 ms each. The sleep is the
    fetch's own (blocked, no CPU wanted): whatever the contention, the input loss and its advice stay, the fetch is
    shown as blocked or waking up, hardly on a CPU, and the number of workers comes from the fetch and the step's own
    work.
    """
    loader = DataLoader(Fetching(10.0), batch_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataLoaderWarning)  # the live check may speak too: the window is judged here
        result = on_a_busy_core(lambda: plain_loop(tmp_path, loader, burn_ms=BURN_MS, data_wait_steps=8),
                                spinners=SPINNERS, n=2)
    rank = result.ranks[0]
    assert rank.losses["cpu_contention"] >= 0.3, rank.losses  # the planted load is measured
    causes = [r.cause for r in result.recommendations]
    assert "input" in causes, (result.verdict, rank.losses, result.recommendations)
    advice = next(r for r in result.recommendations if r.cause == "input")
    assert "try num_workers=" in advice and "upper bound" in advice.basis, advice
    assert result.loader is not None and result.loader["advice_kind"] == "in_process", result.loader
    split = result.loader["wait_split"]  # 40 ms of sleep in each fetch, next to no CPU: blocked, or its wake-ups waiting
    assert split["blocked"] > split["on_cpu"] and split["waiting_for_cpu"] > split["on_cpu"], split

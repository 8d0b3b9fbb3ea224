"""The loader advice follows what the workers did: more workers for workers that wait, none for workers busy on the CPU.

The review's case: a loader waiting on storage at ``num_workers`` = the cores was told "more workers cannot help",
while 8 workers cut its data wait to 1-2%. Here each sample sleeps (``time.sleep``, as a read from storage does) at
``num_workers`` = the cores this test pins the process to: the window and the live warning say "raise num_workers to
N" with N above the cores, and a second run with N workers waits far less for data. The same loader burning the CPU
instead gets "more workers cannot help". Bounds are ratios to what the test plants (sleeps) and to its first run.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from perf_callbacks.cli import main
from perf_callbacks.exceptions import DataLoaderWarning
from tests.integrations.loader_helpers import Fetching, Stepping, cores, train

SAMPLE_MS = 75.0  # x 4 samples: a worker takes 300 ms a batch, two hand one over every 150 ms; a step's own work is
# about 20 ms, and stays under 150 ms on a machine so busy that the training thread waits for a CPU 65% of the time
STEP_MS = 15.0


def raised_to(text: str) -> int:
    found = re.search(r"raise num_workers to (\d+)", text)
    assert found is not None, text
    return int(found.group(1))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # torch's own, for more workers than cores
def test_workers_that_wait_get_more_workers_beyond_the_cores_and_following_it_cuts_the_wait(tmp_path: Path) -> None:
    with cores(2) as pinned:
        n = len(pinned)
        with pytest.warns(DataLoaderWarning, match="raise num_workers to") as said:
            first = train(tmp_path / "first", Stepping(Fetching(SAMPLE_MS), n, STEP_MS))
        (warned,) = [str(w.message) for w in said if w.category is DataLoaderWarning]
        assert raised_to(warned) > n and "were blocked (storage, network, sleep)" in warned, warned
        assert first.loader is not None and first.loader["advice_kind"] == "io_wait", first.loader
        assert first.loader["workers_cpu_fraction"] is not None and first.loader["workers_cpu_fraction"] < 0.5
        advice = next(r for r in first.recommendations if "raise num_workers to" in r)
        suggested = raised_to(advice)
        assert suggested > n and "cannot help" not in advice, advice
        estimate = next(r for r in first.recommendations if r.cause == "input")
        assert "upper bound" in estimate.basis and estimate.estimated_gain_ms is not None, estimate.to_dict()
        second = train(tmp_path / "second", Stepping(Fetching(SAMPLE_MS), suggested, STEP_MS))
    assert second.step_time_ms is not None and first.step_time_ms is not None
    # the gain is an upper bound from the measured fetch and step work: following the advice delivers no more than it
    # (within the steps' own noise), where the old estimate was the whole data wait
    assert first.step_time_ms - second.step_time_ms <= 1.3 * estimate.estimated_gain_ms, (
        first.step_time_ms, second.step_time_ms, estimate.to_dict())
    waited = [r.data_wait_fraction * (r.step_time_ms or 0.0) for r in (first, second)]  # ms a step
    # cut to 0-10% on a quiet machine; to 65% of it under burn.py 2 with busy neighbours (load 6-8 on 2 cores), where
    # every wake-up of the workers' sleeps and of the training thread waits for a core
    assert waited[1] < 0.75 * waited[0], (first.step_time_ms, first.data_wait_fraction, second.step_time_ms,
                                         second.data_wait_fraction)


def test_workers_busy_on_every_core_are_told_more_workers_cannot_help(tmp_path: Path) -> None:
    with cores(2) as pinned:
        n = len(pinned)
        with pytest.warns(DataLoaderWarning, match="cannot help") as said:
            result = train(tmp_path, Stepping(Fetching(SAMPLE_MS / 2, burn=True), n, STEP_MS))
    (warned,) = [str(w.message) for w in said if w.category is DataLoaderWarning]
    assert "raise num_workers" not in warned, warned
    assert result.loader is not None and result.loader["advice_kind"] == "cpu_saturated", result.loader
    assert any("more workers cannot help" in r for r in result.recommendations), result.recommendations
    assert not any("raise num_workers" in r for r in result.recommendations), result.recommendations


def test_the_loader_block_is_in_the_sidecar_and_the_report_json(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with cores(2) as pinned, pytest.warns(DataLoaderWarning):
        train(tmp_path, Stepping(Fetching(SAMPLE_MS), len(pinned), STEP_MS))
    (sidecar,) = (tmp_path / "perf").glob("*/window-*/rank0.summary.json")
    rank = json.loads(sidecar.read_text())["rank"]
    assert set(rank["loader"]) == {"num_workers", "workers_cpu_fraction", "fetch_ms_p50", "fetch_timed",
                                   "advice_kind", "advice_workers", "wait_split"}
    # timed in the workers: 4 samples that sleep 75 ms each, never less (it was num_workers x the median step)
    assert rank["loader"]["fetch_timed"] and rank["loader"]["fetch_ms_p50"] >= 4 * SAMPLE_MS, rank["loader"]
    split = rank["loader"]["wait_split"]  # the workers sleep in every fetch: blocked, not on a CPU
    assert split["blocked"] > split["on_cpu"] and sum(split.values()) == pytest.approx(1.0, abs=1e-3), split
    assert rank["loader"]["num_workers"] == len(pinned) and rank["loader"]["fetch_ms_p50"] > 0
    assert "cpu_contention" in rank["losses"] and rank["load"]["workers"] == len(pinned)
    capsys.readouterr()
    assert main(["report", str(sidecar.parent), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["loader"] == rank["loader"] and report["ranks"][0]["loader"] == rank["loader"]


@pytest.mark.slow
def test_five_runs_of_one_configuration_give_one_first_advice(tmp_path: Path) -> None:
    """The issue saw 4 first advices in 4 runs of one configuration: 5 runs of workers that sleep get one kind.

    The plain loop (no Lightning) with 2 workers whose samples sleep 100 ms (400 ms a batch, 200 ms a step) and a 5 ms
    wait a step: the table's row depends on what the test plants (the workers blocked, the step waiting), not on the
    noise of the machine. The fetch is long enough that the step's own work, which a loaded machine stretches, stays
    the shorter: under burn.py 4, at 20 ms a sample the workers kept up in 4 of 10 runs ('handover', 'none'), at 50 ms
    in 2 of 10.
    """
    from torch.utils.data import DataLoader

    from tests.integrations.loader_helpers import plain_loop

    first: list[str] = []
    for run in range(5):
        loader = DataLoader(Fetching(100.0), batch_size=4, num_workers=2, persistent_workers=True)
        with warnings.catch_warnings():  # the live check over steps 1-8 may speak or not: the windows are compared
            warnings.simplefilter("ignore", DataLoaderWarning)
            result = plain_loop(tmp_path / str(run), loader, waits_ms=[5.0], data_wait_steps=8)
        assert result.loader is not None, result
        first.append(result.loader["advice_kind"])
    assert set(first) == {"io_wait"}, first


def test_in_memory_workers_idle_on_a_busy_machine_are_never_said_to_wait_on_storage(tmp_path: Path) -> None:
    """The issue's false advice: in-memory data, 2 workers, a busy machine: 'raise num_workers to 3 (the workers wait
    on I/O)'. schedstat counts the workers' idle time on their queue as not runnable; their fetches, timed in the
    workers, ran on a CPU or waited for one, never blocked: no word of storage, whatever the data wait.

    The test makes the load: its thread at nice 10 (the workers it forks too) on one core that 2 spinners keep busy.
    """
    from torch.utils.data import DataLoader

    from tests.integrations.loader_helpers import in_memory, on_a_busy_core, plain_loop

    loader = DataLoader(in_memory(), batch_size=4, num_workers=2, persistent_workers=True)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", DataLoaderWarning)
        result = on_a_busy_core(lambda: plain_loop(tmp_path, loader, waits_ms=[10.0], data_wait_steps=8), spinners=2)
    block = result.loader
    assert block is not None and block["fetch_timed"], block
    # idle on their queue most of the window (the figure that was read as "blocked"), yet never blocked in a fetch
    assert block["workers_cpu_fraction"] is not None and block["workers_cpu_fraction"] < 0.5, block
    assert block["wait_split"]["blocked"] < 0.2, block
    assert block["advice_kind"] != "io_wait", block
    words = [str(w.message) for w in said] + [str(r) for r in result.recommendations]
    assert not any(w in s for s in words for w in ("storage", "I/O", "wait on")), words


def test_a_loader_sleeping_10_ms_a_sample_with_2_workers_gets_more_workers_from_its_timed_fetch(tmp_path: Path) -> None:
    """10 ms of sleep per sample, 32 samples a batch: a fetch of at least 320 ms, timed in the workers (it was
    num_workers x the median step), 2 workers hand over one batch every 160 ms at best, longer than the step's own
    work even on a loaded machine (15-80 ms seen); a step of at least ``STEP_MS`` of its own work: ceil(fetch / work)
    workers, more than 2, and no more than the fetch over the planted work."""
    import math

    from perf_callbacks.analysis.judge.decide import MAX_WORKERS

    with cores(2), pytest.warns(DataLoaderWarning, match="raise num_workers to") as said:
        result = train(tmp_path, Stepping(Fetching(10.0), 2, STEP_MS, batch_size=32))
    block = result.loader
    assert block is not None and block["fetch_timed"] and block["advice_kind"] == "io_wait", block
    assert block["fetch_ms_p50"] >= 320.0 and block["wait_split"]["blocked"] > 0.5, block
    n = block["advice_workers"]
    assert 2 < n <= min(MAX_WORKERS, math.ceil(block["fetch_ms_p50"] / STEP_MS)), block
    advice = next(r for r in result.recommendations if r.cause == "input")
    assert f"raise num_workers to {n}" in advice and "were blocked (storage, network, sleep)" in advice, advice
    (warned,) = [str(w.message) for w in said if w.category is DataLoaderWarning]
    assert "of their fetch time" in warned and raised_to(warned) > 2, warned

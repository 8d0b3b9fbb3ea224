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
from pathlib import Path

import pytest

from tests.integrations.loader_helpers import Stepping, busy, cores, in_memory, train

SPINNERS = 3  # on the training thread's one core: it gets about a quarter of it


def test_a_busy_core_is_cpu_contention_not_a_slow_loader(tmp_path: Path) -> None:
    with cores(1) as core, busy(core, SPINNERS):
        result = train(tmp_path, Stepping(in_memory(), 0, step_ms=0.0, batch_size=16), data_wait_steps=8)
    rank = result.ranks[0]
    assert rank.losses["cpu_contention"] >= 0.25, rank.losses  # the planted load: about 75%
    assert result.verdict == "cpu_contention", (result.verdict, result.verdict_note, rank.losses)
    assert result.recommendations[0].startswith("the training thread waited for a CPU"), result.recommendations
    assert not any("raise num_workers" in r or "try num_workers" in r for r in result.recommendations), \
        result.recommendations
    assert result.loader is not None and result.loader["advice_kind"] == "none", result.loader
    (summary,) = (tmp_path / "perf").glob("*/window-*/summary.txt")
    assert "; cpu_contention " in next(x for x in summary.read_text().splitlines() if x.startswith("time by cause:"))
    (sidecar,) = (tmp_path / "perf").glob("*/window-*/rank0.summary.json")
    data = json.loads(sidecar.read_text())
    assert data["verdict"] == "cpu_contention" and data["rank"]["losses"]["cpu_contention"] >= 0.25
    assert data["scalars"]["perf/window/cpu_contention_fraction"] >= 0.25


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_healthy_noisy_run_hears_no_contention_and_no_loader_advice(tmp_path: Path, num_workers: int) -> None:
    rng = random.Random(7)
    jitter = [rng.uniform(-20.0, 20.0) for _ in range(64)]  # steps of 60-100 ms, a few ms of them on a CPU
    result = train(tmp_path, Stepping(in_memory(), num_workers, step_ms=80.0, batch_size=16, jitter=jitter),
                   data_wait_steps=8)  # a DataLoaderWarning would fail the test (pyproject's filterwarnings)
    assert result.verdict not in ("cpu_contention", "input_bound"), (result.verdict, result.ranks[0].losses)
    assert not any("waited for a CPU" in r or "num_workers" in r for r in result.recommendations), \
        result.recommendations
    assert result.loader is not None and result.loader["advice_kind"] == "none", result.loader
    assert "cpu_contention" in result.ranks[0].losses  # measured, and under the bar

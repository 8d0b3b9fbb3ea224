"""The load between two marks: the training thread's and the DataLoader workers' time on a CPU and waiting for one."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.timing.monitor import StepMonitor
from perf_callbacks.core.timing.worker_load import META_KEY, Load, LoadProbe, read_sched, worker_pids


class Fetch(Dataset[torch.Tensor]):
    """``ms`` per sample, asleep or burning this worker's CPU."""

    def __init__(self, ms: float, burn: bool) -> None:
        self.ms, self.burn = ms, burn

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.burn:
            end = time.thread_time() + self.ms / 1e3
            while time.thread_time() < end:
                pass
        else:
            time.sleep(self.ms / 1e3)
        return torch.zeros(4)


def load_of_workers(burn: bool, batches: int = 12) -> Load:
    loader = DataLoader(Fetch(5.0, burn), batch_size=2, num_workers=2)
    it = iter(loader)
    next(it)  # the workers are up
    probe = LoadProbe(2)
    mark = probe.mark()
    assert len(mark.workers) == 2 and set(mark.workers) == set(worker_pids())
    for _ in range(batches):
        next(it)
    load = probe.since(mark)
    del it
    return load


def test_workers_that_sleep_run_little_and_workers_that_burn_run_or_wait_all_the_time() -> None:
    asleep, burning = load_of_workers(burn=False), load_of_workers(burn=True)
    assert asleep.workers == burning.workers == 2
    assert asleep.workers_cpu_fraction is not None and burning.workers_cpu_fraction is not None
    assert asleep.workers_busy is not None and burning.workers_busy is not None
    assert asleep.workers_busy < 0.5 <= burning.workers_busy, (asleep, burning)
    assert burning.workers_cpu_fraction > 3 * asleep.workers_cpu_fraction, (asleep, burning)
    assert asleep.blocked is not None and asleep.blocked > 0.5  # the training thread waited on the queue, blocked


def test_no_workers_are_read_for_an_in_process_loader_and_none_are_claimed() -> None:
    probe = LoadProbe(0)
    mark = probe.mark()
    assert mark.workers == {}
    load = probe.since(mark)
    assert load.workers == 0 and load.workers_cpu_fraction is None and load.workers_busy is None
    assert set(load.meta()) == {"wall_ms", "run_queue_ms", "ran_ms", "workers", "workers_cpu_ms",
                                "workers_run_queue_ms"} and META_KEY == "perf_callbacks_load"


def test_the_thread_figures_need_both_marks_on_one_thread() -> None:
    probe = LoadProbe(0)
    marks = []
    thread = threading.Thread(target=lambda: marks.append(probe.mark()))
    thread.start()
    thread.join()
    load = probe.since(marks[0])
    assert load.run_queue_s is None and load.ran_s is None and load.contention is None and load.blocked is None
    same = probe.since(probe.mark())
    assert same.run_queue_s is not None and same.contention is not None


def test_a_file_that_says_nothing_is_not_measured(tmp_path: Path) -> None:
    assert read_sched(str(tmp_path / "missing")) is None
    (tmp_path / "bad").write_text("many\n")
    assert read_sched(str(tmp_path / "bad")) is None


def test_each_logging_interval_logs_its_cpu_wait_and_its_workers_cpu_share() -> None:
    logged: list[dict[str, float]] = []
    ctx = RunContext(output_dir=Path("unused"), run_name="run", log_every_n_steps=10,
                     log_metrics=lambda m, step: logged.append(m), data_loader=("train_dataloader", 2))
    monitor = StepMonitor(PerfConfig(), ctx, lambda *a: None)
    it = iter(DataLoader(Fetch(5.0, burn=False), batch_size=2, num_workers=2))
    next(it)
    for interval in range(2):
        for step in range(10):
            next(it)
            monitor.measured(interval * 10 + step, 0.005, 0.004, 2, True)
        monitor.log_interval(interval * 10 + 9, None, True, True)
    del it
    assert "perf/train/cpu_contention_fraction" not in logged[0]  # the first interval has no start mark
    assert 0.0 <= logged[1]["perf/train/cpu_contention_fraction"] <= 1.0
    assert logged[1]["perf/loader/workers_cpu_fraction"] < 0.5, logged[1]  # asleep
    # a tag per part: the workers sleep 5 ms a sample, so blocked outweighs their time on a CPU; the parts sum to 1
    parts = [logged[1][f"perf/loader/workers_{p}_fraction"] for p in ("cpu", "blocked", "cpu_contention")]
    assert parts[1] > parts[0] and sum(parts) == pytest.approx(1.0), logged[1]

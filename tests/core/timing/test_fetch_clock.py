"""The workers' fetches, timed in the workers: blocked while fetching is not idle on the queue.

Real DataLoader workers (forked, as torch starts them on Linux), started before the loader is attached as Lightning
starts them; the training loop sleeps between batches, so the workers sit idle on their queue most of the time. Bounds
come from what the test plants (the samples' sleep, the loop's sleep), never from the machine's speed.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from perf_callbacks.core.timing.fetch_clock import FetchClock, FetchMark, attach, prepare
from perf_callbacks.core.timing.worker_load import LoadProbe

SAMPLE_MS = 5.0  # x 4 samples: 20 ms asleep in each fetch
LOOP_MS = 20.0  # the loop's own time a batch: the workers idle that long, less their fetch
BATCHES = 12


class Sleepy(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 4 * BATCHES + 8

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(SAMPLE_MS / 1e3)
        return torch.zeros(4)


def in_memory() -> TensorDataset:
    return TensorDataset(torch.zeros(4 * BATCHES + 8, 4))


def run(data: Dataset[torch.Tensor], other: Dataset[torch.Tensor] | None = None):  # noqa: ANN201
    """The load of ``BATCHES`` batches of a 2-worker loader, its workers forked before it was attached."""
    prepare()
    loader = DataLoader(data, batch_size=4, num_workers=2, persistent_workers=True)
    it = iter(loader)  # the workers fork here, before attach: as under Lightning
    attach(loader)
    if other is not None:  # another loader's workers (validation) while the training loader is attached
        for _ in DataLoader(other, batch_size=4, num_workers=2):
            pass
    next(it)
    probe = LoadProbe(2)
    mark = probe.mark()
    for _ in range(BATCHES):
        next(it)
        time.sleep(LOOP_MS / 1e3)
    load = probe.since(mark)
    del it
    return load


def test_a_fetch_that_sleeps_is_blocked_and_one_from_memory_is_not_whatever_the_idle_time() -> None:
    sleepy = run(Sleepy(), other=Sleepy())
    f = sleepy.fetches
    assert f is not None and 1 <= f.count <= BATCHES + 4, f  # the training loader's only (prefetched: up to 4 more)
    assert f.p50_s >= 4 * SAMPLE_MS / 1e3, f
    assert f.wall_s - f.cpu_s - f.run_queue_s >= 0.95 * f.count * 4 * SAMPLE_MS / 1e3, f  # the planted sleep
    assert sleepy.meta()["fetch_ms_p50"] >= 4 * SAMPLE_MS and sleepy.meta()["fetches"] == f.count

    memory = run(in_memory())
    m = memory.fetches
    assert m is not None and m.count >= 1, m
    # idle on their queue about LOOP_MS a batch (what schedstat alone counts as "not runnable"): not in the fetch
    assert m.wall_s - m.cpu_s - m.run_queue_s < 0.1 * m.count * LOOP_MS / 1e3, m
    assert memory.workers_busy is None or memory.workers_busy < 0.5, memory  # schedstat: mostly "not runnable"


def test_a_loader_not_attached_is_not_timed() -> None:
    prepare()
    attach(None)
    loader = DataLoader(Sleepy(), batch_size=4, num_workers=2)
    probe = LoadProbe(2)
    mark = probe.mark()
    for _ in loader:
        pass
    assert probe.since(mark).fetches is None
    assert "fetches" not in probe.since(mark).meta()


def test_the_median_is_of_the_fetches_between_the_marks() -> None:
    clock = FetchClock(2)
    clock.record(0, 1.0, 0.0, 0.0)  # before the first mark: not counted
    start = clock.mark()
    for wall in (0.010, 0.030, 0.020):
        clock.record(1, wall, 0.001, 0.002)
    f = clock.since(start)
    assert f is not None and f.count == 3 and f.p50_s == 0.020 and abs(f.wall_s - 0.060) < 1e-9, f
    assert abs(f.blocked_fraction - (1 - 0.009 / 0.060)) < 1e-9, f
    assert clock.since(clock.mark()) is None  # none finished
    assert clock.between(start, FetchMark((0,), (0.0, 0.0, 0.0))) is None  # marks of another width

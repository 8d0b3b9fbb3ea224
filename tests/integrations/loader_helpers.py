"""Loaders whose workers wait or burn the CPU, a machine kept busy on known cores, and a Lightning run of either.

Shared by the tests of the loader advice and of CPU contention (``test_loader_advice.py``, ``test_cpu_contention.py``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from perf_callbacks import GPUPerfCallback
from perf_callbacks.analysis import AnalysisResult, analyze
from tests.integrations.lit_helpers import TinyModel, trainer

T = TypeVar("T")
NICE = 10  # a thread at nice 10 gets about a twentieth of a core that two nice-0 spinners share with it
WINDOW = {"skip_first": 14, "wait": 0, "warmup": 1, "active": 10, "repeat": 1}  # steps 15-24, after the check
QUIET_BUT_LOADER = {"degradation_threshold": 1e6, "check_dataloaders": False, "data_wait_steps": 12}


class Fetching(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample takes ``ms``: asleep (``burn=False``: storage, the network) or spinning on the CPU."""

    def __init__(self, ms: float, burn: bool = False, n: int = 4096) -> None:
        self.ms, self.burn, self.n = ms, burn, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.burn:
            end = time.thread_time() + self.ms / 1e3  # CPU time: a busy machine stretches it, as it does real work
            while time.thread_time() < end:
                pass
        else:
            time.sleep(self.ms / 1e3)
        return torch.full((16,), float(i % 7)), torch.tensor(i % 4)


class Stepping(TinyModel):
    """A training step that waits ``step_ms`` (as a host waits for its device) around a tiny model."""

    def __init__(self, data: Dataset[Any], num_workers: int, step_ms: float, batch_size: int = 4,
                 jitter: list[float] | None = None) -> None:
        super().__init__()
        self.data, self.num_workers, self.step_ms, self.batch_size = data, num_workers, step_ms, batch_size
        self.jitter = jitter or [0.0]

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        time.sleep(max(self.step_ms + self.jitter[batch_idx % len(self.jitter)], 0.0) / 1e3)
        return super().training_step(batch, batch_idx)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(self.data, batch_size=self.batch_size, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)


def in_memory(n: int = 4096) -> TensorDataset:
    """A fast in-memory dataset."""
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g))


def train(tmp: Path, model: Stepping, steps: int = 25, **config: Any) -> AnalysisResult:
    """Train ``model`` with the callback (window ``WINDOW``) and return the analysis of its window."""
    cb = GPUPerfCallback(output_dir=str(tmp / "perf"), schedule=WINDOW, **{**QUIET_BUT_LOADER, **config})
    trainer(tmp, [cb], max_steps=steps, limit_val_batches=0).fit(model)
    (window,) = sorted((tmp / "perf").glob("*/window-*"))
    return analyze(window)


@contextlib.contextmanager
def cores(n: int) -> Iterator[set[int]]:
    """Pin this thread (and what it starts: loader workers) to ``n`` of its cores (fewer if it has fewer)."""
    before = os.sched_getaffinity(0)
    chosen = set(sorted(before)[:n])
    os.sched_setaffinity(0, chosen)
    try:
        yield chosen
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def busy(on: set[int], processes: int) -> Iterator[None]:
    """``processes`` processes spinning on the cores ``on``, already spinning when this enters; stopped when it ends."""
    code = f"import os\nos.sched_setaffinity(0, {sorted(on)!r})\nprint(flush=True)\nwhile True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) for _ in range(processes)]
    try:
        for p in procs:
            assert p.stdout is not None
            p.stdout.readline()
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()


def plain_loop(tmp: Path, loader: DataLoader[Any], steps: int = 25, waits_ms: list[float] | None = None,
               burn_ms: float = 0.0, **config: Any) -> AnalysisResult:
    """A plain training loop of a tiny model through the engine (the loop of the benchmarks), its window analysed.

    ``waits_ms``: a wait in each step, in turn (as a host waits for its device: asleep, needing no CPU).
    ``burn_ms``: CPU time each step spins (host work: a busy core stretches it).
    """
    from perf_callbacks.config import PerfConfig
    from perf_callbacks.core.engine.engine import PerfEngine, RunContext
    from perf_callbacks.core.timing.fetch_clock import attach

    cfg = PerfConfig.from_dict({"schedule": WINDOW, **QUIET_BUT_LOADER, **config})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp / "perf", run_name="run", log_every_n_steps=10,
                                        data_loader=("train_dataloader", loader.num_workers)))
    attach(loader)  # as the integrations do: the workers' fetches timed in the workers
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    it = iter(loader)
    for step in range(steps):
        engine.data_start()
        x, y = next(it)
        engine.data_end()
        engine.batch_start(step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        if waits_ms:
            time.sleep(waits_ms[step % len(waits_ms)] / 1e3)
        end = time.thread_time() + burn_ms / 1e3
        while time.thread_time() < end:
            pass
        engine.batch_end(stepped=True, samples=len(x))
    engine.close()
    (window,) = sorted((tmp / "perf").glob("*/window-*"))
    return analyze(window)


class CpuFetch(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A fast in-memory dataset whose batch costs ``batch_ms`` of CPU time to index (as_strided, stack...).

    CPU time, not wall time: a machine that takes the CPU away stretches the fetch, as it stretches real work. The
    batch's cost is spread over its samples.
    """

    def __init__(self, batch_ms: float, batch_size: int, n: int = 4096) -> None:
        self.sample_s, self.data = batch_ms / 1e3 / batch_size, in_memory(n)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = time.thread_time() + self.sample_s
        while time.thread_time() < end:
            pass
        x, y = self.data[i]
        return x, y


def on_a_busy_core(fn: Callable[[], T], spinners: int = 2, n: int = 1) -> T:
    """Run ``fn`` on a thread of low priority (``NICE``) pinned to ``n`` cores that ``spinners`` processes keep busy.

    The thread then waits for that core most of the time, whatever else runs on the machine: contention the test
    controls. Its priority is the thread's alone (this process keeps its own), and ends with it.
    """
    out: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
            out.append(fn())
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            errors.append(err)

    with cores(n) as core, busy(core, spinners):
        thread = threading.Thread(target=run)  # inherits this thread's affinity: the busy core
        thread.start()
        thread.join()
    if errors:
        raise errors[0]
    return out[0]

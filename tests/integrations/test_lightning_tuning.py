"""GPUPerfCallback with Lightning's tuning features and re-fits: gradient accumulation (fixed and scheduled), the
learning-rate finder, a callback reused in a second Trainer, and a fit that failed and is run again."""

from __future__ import annotations

import statistics
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import torch
from lightning.pytorch.callbacks import GradientAccumulationScheduler, LearningRateFinder
from lightning.pytorch.tuner import Tuner

from perf_callbacks import GPUPerfCallback
from perf_callbacks.exceptions import PerfWarning
from tests.integrations.lit_helpers import Recorder, TinyModel, loader, profiler_steps, trainer

QUIET = {"data_wait_steps": 100_000, "check_dataloaders": False, "log_min_interval_s": 0}  # every logging interval
NO_WINDOW = {"skip_first": 100_000}


class SleepyModel(TinyModel):
    """``ms`` of wall time per micro-batch, so that step times are known; ``lr`` for the learning-rate finder."""

    def __init__(self, ms: float) -> None:
        super().__init__()
        self.ms, self.lr = ms, 0.1

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        time.sleep(self.ms / 1e3)
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def samples_per_step(rec: Recorder) -> list[float]:
    """Samples per optimizer step implied by each interval's samples/s and median step time.

    Approximate: the rate uses the interval's total time, the step time its median.
    """
    rates, times = rec.series("perf/train/samples_per_sec"), rec.series("perf/train/step_time_ms")
    return [r * t / 1e3 for r, t in zip(rates, times, strict=True)]


class FakeClock:
    """The engine's ``time.perf_counter``: it moves only when a :class:`TickingModel` step runs."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class TickingModel(SleepyModel):
    """``ms`` of fake-clock time per micro-batch: step times that no load on the machine can change."""

    def __init__(self, clock: FakeClock, ms: float) -> None:
        super().__init__(0)
        self.clock, self.tick = clock, ms / 1e3

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.clock.t += self.tick
        return super().training_step(batch, batch_idx)


def test_samples_per_sec_counts_every_micro_batch_of_an_accumulated_step(tmp_path: Path) -> None:
    rec, clock = Recorder(), FakeClock()
    cb = GPUPerfCallback(schedule=NO_WINDOW, log_every_n_steps=4, degradation_threshold=1e6, **QUIET)
    with mock.patch("perf_callbacks.core.engine.engine.time", SimpleNamespace(perf_counter=clock)):  # where the engine reads it
        trainer(tmp_path, [cb], logger=rec, max_steps=12, accumulate_grad_batches=4).fit(TickingModel(clock, 5),
                                                                                         loader())
    assert rec.series("perf/train/step_time_ms") == pytest.approx([20.0] * 3)  # 4 micro-batches of 5 ms
    assert samples_per_step(rec) == pytest.approx([32.0] * 3)  # 4 micro-batches of 8 samples (32), not 8


def test_a_callback_reused_in_a_second_trainer_reads_the_new_batch_size(tmp_path: Path) -> None:
    cb = GPUPerfCallback(schedule=NO_WINDOW, log_every_n_steps=4, degradation_threshold=1e6, **QUIET)
    clock, rec = FakeClock(), Recorder()
    with mock.patch("perf_callbacks.core.engine.engine.time", SimpleNamespace(perf_counter=clock)):  # where the engine reads it
        trainer(tmp_path / "a", [cb], logger=Recorder(), max_steps=4).fit(TickingModel(clock, 2), loader(batch_size=4))
        trainer(tmp_path / "b", [cb], logger=rec, max_steps=8).fit(TickingModel(clock, 2), loader(batch_size=32))
    assert rec.series("perf/train/step_time_ms") == pytest.approx([2.0, 2.0])  # every step 2 ms of the fake clock
    assert samples_per_step(rec) == pytest.approx([32.0, 32.0])  # 32 per step, not 4


@pytest.mark.slow
def test_a_gradient_accumulation_schedule_is_not_a_slowdown(tmp_path: Path) -> None:
    """From epoch 1 each optimizer step holds 4 micro-batches, as configured: 4x the step time, same time per sample.

    About 4 s of such steps: the slowdown detector's baseline (epoch 0) and its 3 s minimum are both passed.
    """
    rec = Recorder()
    # threshold 100%: a 4x longer step (300%) still warns if the detector compares step times, while a machine
    # busy with other work (another test's processes winding down) cannot pass for a slowdown
    cb = GPUPerfCallback(schedule=NO_WINDOW, log_every_n_steps=4, degradation_threshold=1.0, **QUIET)
    accumulate = GradientAccumulationScheduler(scheduling={0: 1, 1: 4})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer(tmp_path, [cb, accumulate], logger=rec, max_steps=-1, max_epochs=4).fit(
            SleepyModel(20), loader(n=512))
    assert [str(w.message) for w in seen if issubclass(w.category, PerfWarning)] == []
    times = rec.series("perf/train/step_time_ms")
    assert statistics.median(times[-6:]) > 2 * statistics.median(times[1:6])  # the step time did grow (4x)


def test_a_learning_rate_search_before_training_is_not_counted_in_the_first_step(tmp_path: Path) -> None:
    """LearningRateFinder runs its search in on_fit_start, before training: none of it is step 0's time."""
    rec = Recorder()
    cb = GPUPerfCallback(schedule=NO_WINDOW, log_every_n_steps=4, degradation_threshold=1e6, **QUIET)
    finder = LearningRateFinder(num_training_steps=30)  # 30 steps of 5 ms: 150 ms of search
    trainer(tmp_path, [cb, finder], logger=rec, max_steps=12).fit(SleepyModel(5), loader(n=1024))
    per_step = samples_per_step(rec)
    # about 8 samples per step in each interval (the estimate is noisy: rate over total time, step time by median);
    # with the search in step 0 the first interval reads about 1, a fraction of the others
    assert len(per_step) == 3 and per_step[0] > 0.5 * max(per_step[1:]), per_step


def test_tuner_lr_find_alone_prints_no_window_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    cb = GPUPerfCallback(schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}, **QUIET)
    trn = trainer(tmp_path, [cb], max_steps=8)
    Tuner(trn).lr_find(SleepyModel(0), train_dataloaders=loader(n=1024), num_training=20)
    assert "perf-callbacks" not in capfd.readouterr().err  # no training ran for us: nothing to say
    trn.fit(SleepyModel(0), loader())  # and the fit after it records its window
    (trace,) = (p for p in cb.engine.exported)  # type: ignore[union-attr]
    assert profiler_steps(trace) == [3, 4]


class FailsInValidation(TinyModel):
    fail = True

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        if self.fail:
            raise RuntimeError("bad validation")
        super().validation_step(batch, batch_idx)


def test_a_fit_that_failed_leaves_nothing_behind_and_the_next_fit_records(tmp_path: Path) -> None:
    """The first fit fails in validation between two steps of a window; the user fixes it and fits again."""
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 2, "wait": 0, "warmup": 1,
                                                                       "active": 3}, **QUIET)
    trn = trainer(tmp_path, [cb], max_steps=12, val_check_interval=4)
    model = FailsInValidation()
    with pytest.raises(RuntimeError, match="bad validation"):
        trn.fit(model, loader(), loader(n=32))
    assert not {"_on_before_fetch", "_on_after_fetch"} & set(vars(trn.fit_loop.epoch_loop))  # no stale wrapper
    assert not torch.autograd.profiler._is_profiler_enabled
    model.fail = False
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trn.fit(model, loader(), loader(n=32))
    assert [str(w.message) for w in seen if issubclass(w.category, PerfWarning)] == []
    assert not torch.autograd.profiler._is_profiler_enabled  # no profiler left running after the fit
    assert not {"_on_before_fetch", "_on_after_fetch"} & set(vars(trn.fit_loop.epoch_loop))
    # the same Trainer goes on from global_step 4: the rest of the window (steps 4-5) is recorded
    assert cb.engine is not None and [profiler_steps(p) for p in cb.engine.exported] == [[4, 5]]


class ShortStream(torch.utils.data.IterableDataset):
    """Says 64 samples (8 batches of 8) but yields 48: the epoch ends at a fetch that raises StopIteration."""

    def __len__(self) -> int:
        return 64

    def __iter__(self) -> Any:
        for i in range(48):
            yield torch.randn(16), torch.tensor(i % 4)


class SkipsTheRestAtBatch3(TinyModel):
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        return -1 if batch_idx == 3 else None  # Lightning's "skip the rest of the epoch"


@pytest.mark.parametrize("case", ["loader-runs-out", "batch-start-returns-minus-1"])
def test_training_that_ends_at_a_step_that_never_runs_leaves_no_phantom_step(tmp_path: Path, case: str) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 0, "wait": 0, "warmup": 1,
                                                                       "active": 10}, **QUIET)
    trn = trainer(tmp_path, [cb], max_steps=-1, max_epochs=1)
    if case == "loader-runs-out":
        trn.fit(TinyModel(), torch.utils.data.DataLoader(ShortStream(), batch_size=8))
    else:
        trn.fit(SkipsTheRestAtBatch3(), loader())
    last = trn.global_step - 1  # steps 0..last ran; step 0 is the warm-up
    assert cb.engine is not None
    (trace,) = cb.engine.exported
    assert trace.parent.name == f"window-000001-{last:06d}" and profiler_steps(trace) == list(range(1, last + 1))


class StepsEveryOtherBatch(TinyModel):
    """An overridden optimizer_step that skips optimizer.step() on odd batches: Lightning still counts those steps."""

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        if batch_idx % 2:
            optimizer_closure()
        else:
            optimizer.step(closure=optimizer_closure)


def test_an_optimizer_step_override_that_skips_the_update_still_numbers_steps_by_global_step(tmp_path: Path) -> None:
    cb = GPUPerfCallback(schedule={"skip_first": 4, "wait": 0, "warmup": 1, "active": 2}, **QUIET)
    trn = trainer(tmp_path, [cb], max_steps=12)
    trn.fit(StepsEveryOtherBatch(), loader())
    assert cb.engine is not None and cb._steps == trn.global_step == 12
    (trace,) = cb.engine.exported
    assert trace.parent.name == "window-000005-000006" and profiler_steps(trace) == [5, 6]

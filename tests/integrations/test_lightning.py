from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch.utils.data import DataLoader

from perf_callbacks import DataLoaderWarning, GPUPerfCallback, PerfConfigError
from tests.integrations.lit_helpers import SlowDataset, TinyModel, loader, names, profiler_steps, trainer

# CPU step times are noisy; every logging interval, as the tests count them (the floor: test_log_interval_floor.py)
QUIET = {"check_dataloaders": False, "degradation_threshold": 100.0, "log_min_interval_s": 0}


def test_zero_argument_construction_and_bad_option() -> None:
    assert GPUPerfCallback().config.schedule.active == 3
    with pytest.raises(PerfConfigError, match="schedule.active must be >= 1, got 0"):
        GPUPerfCallback(schedule={"active": 0})
    with pytest.raises(PerfConfigError, match="unknown key 'schedule.steps'"):
        GPUPerfCallback(schedule={"steps": 3})


def test_profiler_steps_are_global_steps_with_accumulation_and_repeat(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 2, "wait": 0, "warmup": 1,
                                                                      "active": 2, "repeat": 2}, **QUIET)
    trainer(tmp_path, [cb], max_steps=10, accumulate_grad_batches=3).fit(TinyModel(), loader())
    assert [p.parent.name for p in cb.engine.exported] == ["window-000003-000004", "window-000006-000007"]
    assert [profiler_steps(p) for p in cb.engine.exported] == [[3, 4], [6, 7]]
    phases = names(cb.engine.exported[0])
    assert phases.count("perf_callbacks.forward") == 2 * 3
    assert phases.count("perf_callbacks.backward") == 2 * 3
    assert phases.count("perf_callbacks.optimizer_step") == 2
    assert not torch.autograd.profiler._is_profiler_enabled


def test_sanity_check_not_counted_and_validation_has_its_own_range(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path), schedule={"skip_first": 3, "wait": 0, "warmup": 1, "active": 3},
                         **QUIET)
    t = trainer(tmp_path, [cb], max_steps=10, num_sanity_val_steps=2, val_check_interval=5)
    t.fit(TinyModel(), loader(), loader(n=32))
    (path,) = cb.engine.exported
    assert profiler_steps(path) == [4, 5, 6]
    # validation runs after the 5th batch (end of step 4), inside the window, in its own range
    assert names(path).count("perf_callbacks.validation") == 1


def test_default_output_dir_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    cb = GPUPerfCallback(schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}, **QUIET)
    trainer(tmp_path, [cb], logger=logger, log_every_n_steps=4, max_steps=9).fit(TinyModel(), loader())
    (path,) = cb.engine.exported
    assert path.is_relative_to(Path(logger.log_dir) / "perf")
    assert path.name == "rank0.pt.trace.json.gz"
    summary = (path.parent / "summary.txt").read_text()
    assert summary.startswith("perf-callbacks summary: steps 3-4, rank 0")
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "perf-callbacks" in x]  # one line per window
    assert line.startswith("perf-callbacks: steps 3-4 ") and line.endswith(f" -> {path.parent / 'summary.txt'}")



def test_verbose_prints_the_whole_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cb = GPUPerfCallback(schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}, verbose=True, **QUIET)
    trainer(tmp_path, [cb], max_steps=6).fit(TinyModel(), loader())
    out = capsys.readouterr().out
    assert "perf-callbacks summary: steps 3-4, rank 0" in out and "\nperf-callbacks: verdict: " in out
    assert all(x.startswith("perf-callbacks") for x in out.splitlines() if "verdict" in x or "top ops" in x)

def test_metrics_go_to_tensorboard_every_n_steps(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(str(tmp_path), name="tb")
    cb = GPUPerfCallback(schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}, **QUIET)
    trainer(tmp_path, [cb], logger=logger, log_every_n_steps=4, max_steps=12).fit(TinyModel(), loader())
    acc = EventAccumulator(logger.log_dir, size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"perf/train/step_time_ms", "perf/train/data_wait_fraction", "perf/memory/host_rss_mb"} <= set(tags)
    assert [e.step for e in acc.Scalars("perf/memory/host_rss_mb")] == [4, 8, 12]
    assert "perf/window/summary/text_summary" in acc.Tags()["tensors"]


def test_num_workers_zero_with_a_slow_dataset_warns_once_with_the_measurement(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path), schedule={"skip_first": 100}, data_wait_steps=5)
    slow = DataLoader(SlowDataset(n=64, ms=2.0), batch_size=8, num_workers=0)
    with pytest.warns(DataLoaderWarning, match=r"train_dataloader has num_workers=0; data loading took \d+% of step "
                      r"time over steps \d+-\d+; try num_workers=\d+") as rec:
        trainer(tmp_path, [cb], max_steps=8).fit(TinyModel(), slow)
    assert len([w for w in rec if issubclass(w.category, DataLoaderWarning)]) == 1


def test_num_workers_zero_with_a_fast_in_memory_loader_stays_silent(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path), schedule={"skip_first": 100}, data_wait_steps=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataLoaderWarning)
        trainer(tmp_path, [cb], max_steps=20).fit(TinyModel(), loader(num_workers=0))


class SteadyModel(TinyModel):
    """100 ms of work a step (a sleep): a loader worker keeps ahead of it however loaded the machine is (with 20 ms,
    a worker starved of CPU on a loaded 2-core runner left 20% data wait)."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        time.sleep(0.1)
        return super().training_step(batch, batch_idx)


def test_no_warning_for_a_good_loader(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path), schedule={"skip_first": 100}, data_wait_steps=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataLoaderWarning)
        trainer(tmp_path, [cb], max_steps=8).fit(SteadyModel(), loader(num_workers=1))
    check = cb.engine.monitor.data_wait_check
    assert check.done and check.count == 5  # the check ran (steps 1-5, after the warm-up step 0) and said nothing


def test_user_exception_propagates_and_partial_trace_is_flushed(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path), schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 4},
                         **QUIET)
    with pytest.raises(ValueError, match="user error at step 5") as info:
        trainer(tmp_path, [cb], max_steps=20).fit(TinyModel(fail_at_step=5), loader())
    assert type(info.value) is ValueError
    assert not torch.autograd.profiler._is_profiler_enabled
    (path,) = cb.engine.exported
    assert path.parent.name == "window-000003-000005"  # steps 3, 4 and the failing step 5 ran; 6 never began
    assert profiler_steps(path) == [3, 4, 5]
    assert "interrupted by ValueError" in (path.parent / "summary.txt").read_text()
    assert cb.engine.nvtx.depth == 0


def test_repeated_fit_into_the_same_output_dir_never_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "perf"
    cb = GPUPerfCallback(output_dir=str(out), schedule={"skip_first": 1, "wait": 0, "warmup": 0, "active": 1}, **QUIET)
    for _ in range(2):
        trainer(tmp_path, [cb], max_steps=3).fit(TinyModel(), loader())
    runs = sorted(p for p in out.iterdir())
    assert len(runs) == 2
    assert all(len(list(r.rglob("*.pt.trace.json.gz"))) == 1 for r in runs)


def test_resume_continues_the_schedule_by_global_step(tmp_path: Path) -> None:
    sched = {"skip_first": 2, "wait": 1, "warmup": 0, "active": 1, "repeat": 0}  # records steps 3, 5, 7, ...
    first = GPUPerfCallback(output_dir=str(tmp_path / "a"), schedule=sched, **QUIET)
    t = trainer(tmp_path, [first], max_steps=6)
    t.fit(TinyModel(), loader())
    ckpt = tmp_path / "mid.ckpt"
    t.save_checkpoint(ckpt)
    second = GPUPerfCallback(output_dir=str(tmp_path / "b"), schedule=sched, **QUIET)
    trainer(tmp_path, [second], max_steps=10).fit(TinyModel(), loader(), ckpt_path=str(ckpt))
    assert [profiler_steps(p) for p in first.engine.exported] == [[3], [5]]
    assert [profiler_steps(p) for p in second.engine.exported] == [[7], [9]]
    # a checkpoint saved with the callback loads without it
    plain = trainer(tmp_path, [], max_steps=8)
    plain.fit(TinyModel(), loader(), ckpt_path=str(ckpt))
    assert plain.global_step == 8


def test_resuming_a_run_whose_windows_are_done_records_nothing_more(tmp_path: Path) -> None:
    sched = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 1, "repeat": 1}  # one window: step 3
    first = GPUPerfCallback(output_dir=str(tmp_path / "a"), schedule=sched, **QUIET)
    t = trainer(tmp_path, [first], max_steps=5)
    t.fit(TinyModel(), loader())
    ckpt = tmp_path / "done.ckpt"
    t.save_checkpoint(ckpt)
    assert [profiler_steps(p) for p in first.engine.exported] == [[3]]
    again = GPUPerfCallback(output_dir=str(tmp_path / "b"), schedule=sched, **QUIET)
    resumed = trainer(tmp_path, [again], max_steps=12)
    resumed.fit(TinyModel(), loader(), ckpt_path=str(ckpt))
    assert resumed.global_step == 12  # steps 5-11 ran
    assert again.engine.exported == [] and not list((tmp_path / "b").rglob("*.gz"))


def test_validate_and_test_calls_around_fit_write_nothing_and_mix_no_runs(tmp_path: Path) -> None:
    out = tmp_path / "perf"
    cb = GPUPerfCallback(output_dir=str(out), schedule={"skip_first": 1, "wait": 0, "warmup": 0, "active": 1},
                         **QUIET)
    t = trainer(tmp_path, [cb], max_steps=3, limit_test_batches=2)
    model = TinyModel()
    model.test_step = model.validation_step
    t.validate(model, loader(n=16))
    assert cb.engine is None and not out.exists()
    t.fit(model, loader(), loader(n=16))
    first = cb.engine
    t.validate(model, loader(n=16))
    t.test(model, loader(n=16))
    assert cb.engine is first and [p.parent.name for p in first.exported] == ["window-000001-000001"]
    trainer(tmp_path, [cb], max_steps=3).fit(model, loader())
    runs = sorted(out.iterdir())
    assert len(runs) == 2
    for run in runs:
        (summary,) = run.rglob("summary.txt")
        assert summary.read_text().count("perf-callbacks summary:") == 1


def test_ranks_beyond_the_world_size_fail_before_training(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path), ranks=[1], **QUIET)  # on one process: rank 0 only
    t = trainer(tmp_path, [cb], max_steps=3)
    with pytest.raises(PerfConfigError, match=r"ranks=\[1\] names ranks beyond the world size 1; valid ranks are 0-0"):
        t.fit(TinyModel(), loader())
    assert t.global_step == 0


def test_phase_spans_are_annotations_for_the_analysis(tmp_path: Path) -> None:
    from perf_callbacks.analysis import analyze

    cb = GPUPerfCallback(output_dir=str(tmp_path), schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 3},
                         **QUIET)
    trainer(tmp_path, [cb], max_steps=8).fit(TinyModel(), loader())
    (path,) = cb.engine.exported
    assert "perf_callbacks.data_wait" in names(path)
    result = analyze(path)
    assert result.top_ops and not any(op["name"].startswith("perf_callbacks.") for op in result.top_ops)
    assert result.data_wait_fraction > 0  # the data_wait phase spans are read as data-loading time


def test_checkpoint_saves_get_their_own_range_and_the_trainer_is_restored(tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import ModelCheckpoint

    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 2, "wait": 0, "warmup": 1,
                                                                       "active": 2}, **QUIET)
    ckpt = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=1, save_top_k=-1)
    t = trainer(tmp_path, [cb, ckpt], max_steps=7, enable_checkpointing=True)
    t.fit(TinyModel(), loader())
    (path,) = cb.engine.exported
    # a save belongs to the step it follows: step 3's is recorded; step 4's comes after the window's last optimizer step
    assert names(path).count("perf_callbacks.checkpoint") == 1
    assert "save_checkpoint" not in vars(t)
    assert len(list((tmp_path / "ckpt").glob("*.ckpt"))) == 7

"""AcceleratePerfHook: interval metrics in every loop shape and fp16 skipped steps; 2 processes, resume included.

The 2-process part runs this file as a script: ``python -m tests.integrations.test_accelerate_intervals OUT_DIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
import torch
from accelerate import Accelerator
from accelerate.optimizer import patch_optimizer_step
from torch import nn
from torch.utils.data import DataLoader

from perf_callbacks import AcceleratePerfHook, PerfWarning
from perf_callbacks.integrations._accelerate import metrics as accelerate_metrics
from tests.integrations.acc_helpers import DATA, ROOT, _free_port, data, plain_loop, setup, tb_scalars

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # conftest.py
NO_WINDOW = {"skip_first": 100}


def flush_steps(hook: AcceleratePerfHook) -> list[int]:
    """Record the steps at which the cross-rank flush runs (the only place the hook may sync)."""
    assert hook.metrics is not None
    calls: list[int] = []
    flush = hook.metrics.flush
    hook.metrics.flush = lambda step: (calls.append(step), flush(step))[1]  # type: ignore[method-assign]
    return calls


def loop_with_break(acc: Accelerator, hook: AcceleratePerfHook, parts: Any, stop_at: int) -> None:
    """The Hugging Face examples' loop: ``if completed_steps >= max_train_steps: break``."""
    model, opt, dl = parts
    completed = 0
    for x, y in hook.iter(dl):
        with acc.accumulate(model):
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
        completed += int(acc.sync_gradients)
        if completed >= stop_at:
            break


# ---- interval metrics ------------------------------------------------------------------------------------------------
def test_a_plain_loop_logs_the_interval_metrics_at_logging_steps_only(tmp_path: Path) -> None:
    acc, hook, parts = setup(tmp_path, schedule=NO_WINDOW, log_every_n_steps=4)  # 16 batches, no hook.iter
    calls = flush_steps(hook)
    with hook:
        plain_loop(acc, parts)
    assert hook.optimizer_steps == 16 and calls == [4, 8, 12, 16]
    assert tb_scalars(tmp_path / "perf")["perf/train/step_time_ms"] == [4, 8, 12, 16]


def test_a_loop_that_breaks_after_a_logging_step_logs_that_interval_at_close(tmp_path: Path) -> None:
    acc, hook, parts = setup(tmp_path, ga=2, n=128, schedule=NO_WINDOW, log_every_n_steps=4)  # 16 steps
    with hook:
        loop_with_break(acc, hook, parts, stop_at=12)
    assert hook.optimizer_steps == 12
    assert tb_scalars(tmp_path / "perf")["perf/train/step_time_ms"] == [4, 8, 12]


def test_a_break_then_a_new_loop_logs_each_interval_once(tmp_path: Path) -> None:
    acc, hook, parts = setup(tmp_path, schedule=NO_WINDOW, log_every_n_steps=4)  # 16 batches
    calls = flush_steps(hook)
    with hook:
        loop_with_break(acc, hook, parts, stop_at=12)
        loop_with_break(acc, hook, parts, stop_at=8)  # the next epoch
    assert hook.optimizer_steps == 20 and calls == [4, 8, 12, 16, 20]
    assert tb_scalars(tmp_path / "perf")["perf/train/step_time_ms"] == [4, 8, 12, 16, 20]


def test_the_logged_data_wait_is_the_loaders_time_not_our_flush(tmp_path: Path) -> None:
    """Fed times (a fake clock for the engine): each fetch 30 ms, each step's work 70 ms, and our metrics flush at a
    logging step 2 s. The flush is ours, set aside: the logged data wait stays 30% of step time (17-35, i.e. the flush
    counted as the next step's data wait but not as its time, if the fetch's timing started before the flush)."""
    from tests.core.engine_helpers import FakeClock

    # flops off: the FLOP-counting step 0 would be set aside, leaving the first 2-step interval with no step measured
    acc, hook, (model, opt, dl) = setup(tmp_path, schedule=NO_WINDOW, log_every_n_steps=2, check_dataloaders=False,
                                        flops=False)
    assert hook.metrics is not None
    clock, logged, flush = FakeClock(), [], hook.metrics.flush

    def slow_flush(step: int) -> None:
        assert hook.metrics is not None
        logged.append((step, dict(hook.metrics.pending)))
        clock.t += 2.0  # e.g. the cross-rank gather waiting for a slower rank
        flush(step)

    def fetch(loader: Any) -> Any:
        for batch in loader:
            clock.t += 0.03
            yield batch

    hook.metrics.flush = slow_flush  # type: ignore[method-assign]
    with mock.patch("perf_callbacks.core.engine.engine.time", SimpleNamespace(perf_counter=clock)), hook:
        for x, y in hook.iter(fetch(dl)):  # 16 batches, 16 steps
            clock.t += 0.07
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
    assert [step for step, _ in logged] == list(range(2, 17, 2))
    for step, metrics in logged:
        assert metrics["perf/train/data_wait_fraction"] == pytest.approx(0.3), step
        assert metrics["perf/train/step_time_ms"] == pytest.approx(100.0), step
        assert metrics["perf/train/samples_per_sec"] == pytest.approx(40.0), step


# ---- fp16: a step the GradScaler skips counts once -------------------------------------------------------------------
def with_grad_scaler(acc: Accelerator, opt: Any) -> None:
    """What ``Accelerator(mixed_precision="fp16")`` sets up on CUDA: a GradScaler in the accelerator and optimizer."""
    acc.scaler = opt.scaler = torch.amp.GradScaler("cpu")
    opt._accelerate_step_called = False
    opt._optimizer_original_step_method = opt.optimizer.step
    opt._optimizer_patched_step_method = patch_optimizer_step(opt, opt.optimizer.step)


@pytest.mark.parametrize(("ga", "every", "use_iter"), [(1, 4, True), (1, 4, False), (4, 1, True)],
                         ids=["manual-accumulation", "manual-accumulation-no-iter", "accelerator.accumulate"])
def test_an_fp16_skipped_step_counts_once(tmp_path: Path, ga: int, every: int, use_iter: bool) -> None:
    acc, hook, (model, opt, dl) = setup(tmp_path, ga=ga, schedule=NO_WINDOW)  # 16 micro-batches: 4 steps
    with_grad_scaler(acc, opt)
    real: list[int] = []
    opt.optimizer.register_step_post_hook(lambda *_: real.append(1))
    with hook:
        for i, (x, y) in enumerate(hook.iter(dl) if use_iter else dl):
            with acc.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y) / 4
                acc.backward(loss * float("inf") if i == 3 else loss)  # overflow: the scaler skips the 1st step
                if (i + 1) % every == 0:
                    opt.step()
                    opt.zero_grad()
    assert len(real) == 3 and hook.optimizer_steps == 4


# ---- 2 processes -----------------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
def test_two_processes_log_every_interval_and_warn_nothing_on_resume(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "tests.integrations.test_accelerate_intervals", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    # a plain loop, and a loop that breaks at step 12: every interval, cross-rank, the last one at a clean close (the
    # default log_min_interval_s would widen these fast intervals on one process; the cross-rank gather takes none)
    assert tb_scalars(tmp_path / "plain")["perf/train/step_time_ms/max"] == [4, 8, 12, 16]
    assert tb_scalars(tmp_path / "break")["perf/train/step_time_ms/mean"] == [4, 8, 12]
    # rank 1 failed after step 12: rank 0's clean close waited a bounded time for it, logged without it, and exited
    assert r1["error"] == "ValueError: user error after step 12" and r0["close_s"] < 2 * r0["close_wait_s"] + 5
    assert tb_scalars(tmp_path / "fail")["perf/train/step_time_ms/max"] == [4, 8]
    # resume mid-epoch with skip_first_batches, and drop_last with few batches: no ShardingWarning on either rank
    assert r0["warnings"] == r1["warnings"] == [] and r0["resumed_steps"] == r1["resumed_steps"] == 11 + 16 + 2


def _rank_main(rank: int, out: Path, port: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    accelerate_metrics.CLOSE_WAIT_S = 2.0
    acc = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    parts = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(128, shuffle=True, num_workers=0))
    options: dict[str, Any] = {"schedule": NO_WINDOW, "log_every_n_steps": 4, "degradation_threshold": 1e6}
    result: dict[str, Any] = {"close_wait_s": accelerate_metrics.CLOSE_WAIT_S}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", PerfWarning)
        with AcceleratePerfHook(output_dir=str(out / "plain"), **options).register(acc):
            plain_loop(acc, parts)
        with AcceleratePerfHook(output_dir=str(out / "break"), **options).register(acc) as hook:
            loop_with_break(acc, hook, parts, stop_at=12)
        hook = AcceleratePerfHook(output_dir=str(out / "fail"), **options).register(acc)
        try:
            with hook:
                loop_with_break(acc, hook, parts, stop_at=12)
                if rank == 1:
                    raise ValueError("user error after step 12")
                t0 = time.perf_counter()
        except ValueError as err:
            result["error"] = f"{type(err).__name__}: {err}"
        else:
            result["close_s"] = time.perf_counter() - t0
        model, opt, dl = parts
        drop_last = acc.prepare(DataLoader(DATA, batch_size=12, drop_last=True))  # 5 batches: 2 per rank
        with AcceleratePerfHook(output_dir=str(out / "resume"), **options).register(acc) as hook:
            for loader in (acc.skip_first_batches(dl, 5), dl, drop_last):
                plain_loop(acc, (model, opt, hook.iter(loader)))
        result["resumed_steps"] = hook.optimizer_steps
    result["warnings"] = [f"{w.category.__name__}: {w.message}" for w in seen]
    (out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    torch.multiprocessing.start_processes(_rank_main, args=(Path(sys.argv[1]), _free_port()), nprocs=2,
                                          start_method="fork")

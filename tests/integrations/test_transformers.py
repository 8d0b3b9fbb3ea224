"""TransformersPerfCallback with a real ``transformers.Trainer`` on CPU (tiny model, synthetic data)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")
from accelerate.state import AcceleratorState, GradientState  # noqa: E402
from transformers import TrainingArguments  # noqa: E402

import perf_callbacks  # noqa: E402
from perf_callbacks import DataLoaderWarning, PerfConfig, PerfConfigError, TransformersPerfCallback  # noqa: E402
from perf_callbacks.cli import main as cli_main  # noqa: E402
from perf_callbacks.core.memory.sampler import OutOfMemoryError  # noqa: E402
from tests.integrations.hf_helpers import (  # noqa: E402
    SCHEDULE,
    FailAt,
    callback,
    durations_ms,
    make_trainer,
    phases_by_step,
    profiler_steps,
    windows,
)

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # conftest.py
ROOT = Path(__file__).resolve().parents[2]
MICRO = ["data_wait"] * 3 + ["forward", "backward"] * 3 + ["optimizer_step"]  # one optimizer step, ga=3


# ---- construction ----------------------------------------------------------------------------------------------------
def test_construction_from_keywords_config_and_yaml() -> None:
    assert TransformersPerfCallback().config == PerfConfig()
    assert TransformersPerfCallback(config=PerfConfig(top_k=3)).config.top_k == 3
    assert TransformersPerfCallback.from_yaml(ROOT / "examples/transformers/perf.yaml").config.schedule.repeat == 2
    with pytest.raises(PerfConfigError, match="schedule.active must be >= 1, got 0"):
        TransformersPerfCallback(schedule={"active": 0})
    with pytest.raises(PerfConfigError, match=r"either config= or options.*\['top_k'\]"):
        TransformersPerfCallback(top_k=3, config=PerfConfig())


def test_import_without_transformers_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "perf_callbacks.integrations.transformers")
    with pytest.raises(ImportError, match=r'pip install "perf-callbacks\[transformers\]"'):
        perf_callbacks.TransformersPerfCallback  # noqa: B018


def test_importing_the_package_loads_no_transformers() -> None:
    code = "import sys, perf_callbacks; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_ranks_beyond_the_world_size_fail_before_the_first_step(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, [callback(tmp_path / "perf", ranks=[1])], max_steps=2)
    with pytest.raises(PerfConfigError, match=r"ranks=\[1\] names ranks beyond the world size 1; valid ranks are 0-0"):
        trainer.train()


# ---- steps, windows, phases, report ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def accumulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TransformersPerfCallback]:
    """ga=3, 8 optimizer steps (24 micro-batches), two windows: steps 3-4 and 6-7."""
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    out = tmp_path_factory.mktemp("accumulated")
    cb = callback(out / "perf", schedule={**SCHEDULE, "repeat": 2})
    trainer = make_trainer(out, [cb], max_steps=8, ga=3)
    trainer.train()
    assert trainer.state.global_step == 8
    return out / "perf", cb


def test_gradient_accumulation_3_profiler_steps_are_global_steps(accumulated: Any) -> None:
    out, cb = accumulated
    assert windows(out) == {"window-000003-000004": ["rank0.pt.trace.json.gz"],
                            "window-000006-000007": ["rank0.pt.trace.json.gz"]}  # every repeat window is exported
    first, second = cb.engine.exported
    assert profiler_steps(first) == [3, 4] and profiler_steps(second) == [6, 7]
    # each ProfilerStep#N holds the 3 micro-batches of optimizer step N: their data wait, forward and backward
    assert phases_by_step(first) == {3: MICRO, 4: MICRO}
    assert phases_by_step(second) == {6: MICRO, 7: MICRO}


def test_the_report_on_the_output_gives_a_verdict(accumulated: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = accumulated
    assert cli_main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "verdict: " in text and "window-000006-000007" in text


def test_a_callback_added_after_construction_works(tmp_path: Path) -> None:
    cb = callback(tmp_path / "perf")
    trainer = make_trainer(tmp_path, [], max_steps=5)
    trainer.add_callback(cb)
    trainer.train()
    (trace,) = cb.engine.exported
    assert profiler_steps(trace) == [3, 4] and phases_by_step(trace)[4] == ["data_wait", "forward", "backward",
                                                                           "optimizer_step"]


def test_wrappers_are_removed_when_training_ends(tmp_path: Path) -> None:
    cb = callback(tmp_path / "perf")
    trainer = make_trainer(tmp_path, [cb], max_steps=2)
    trainer.train()
    assert cb.trainer is trainer
    assert {"get_batch_samples", "evaluate", "_save_checkpoint"}.isdisjoint(vars(trainer))
    assert "backward" not in vars(trainer.accelerator)


# ---- data wait -------------------------------------------------------------------------------------------------------
def test_data_wait_is_the_time_inside_the_dataloader_only(tmp_path: Path) -> None:
    """3 ms per sample x 4 samples per micro-batch; a 30 ms callback between fetch and compute is not data wait."""
    from transformers import TrainerCallback

    class Slow(TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            import time

            time.sleep(0.03)

    cb = callback(tmp_path / "perf", schedule={"skip_first": 1, "wait": 0, "warmup": 0, "active": 2})
    make_trainer(tmp_path, [Slow(), cb], max_steps=3, ga=2, sleep_ms=3.0).train()
    (trace,) = cb.engine.exported
    waits = durations_ms(trace, "data_wait")
    assert len(waits) == 4  # 2 steps x 2 micro-batches
    assert all(12.0 <= w < 40.0 for w in waits), waits  # 12 ms of loading; never the callback's 30 ms on top


# ---- resume, evaluation, checkpoints ---------------------------------------------------------------------------------
def test_resume_from_a_trainer_checkpoint_continues_the_numbering(tmp_path: Path) -> None:
    schedule = {"skip_first": 5, "wait": 0, "warmup": 0, "active": 2}
    first = callback(tmp_path / "perf", schedule=schedule)
    make_trainer(tmp_path, [first], max_steps=4, save_strategy="steps", save_steps=4).train()
    assert first.engine.exported == []  # steps 0-3: before the window
    second = callback(tmp_path / "perf", schedule=schedule)
    trainer = make_trainer(tmp_path, [second], max_steps=8)
    trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    (trace,) = second.engine.exported
    assert trace.parent.name == "window-000005-000006" and profiler_steps(trace) == [5, 6]


def test_evaluation_and_checkpoint_in_a_window_get_their_own_ranges(tmp_path: Path) -> None:
    """Evaluation and the save at global_step 5 follow step 4's optimizer step: in ProfilerStep#4, in own ranges."""
    cb = callback(tmp_path / "perf", schedule={"skip_first": 4, "wait": 0, "warmup": 0, "active": 2})
    make_trainer(tmp_path, [cb], max_steps=8, eval_steps=5, save_strategy="steps", save_steps=5).train()
    (trace,) = cb.engine.exported
    assert profiler_steps(trace) == [4, 5]
    steps = phases_by_step(trace)
    assert steps[4] == ["data_wait", "forward", "backward", "optimizer_step", "validation", "checkpoint"]
    assert steps[5] == ["data_wait", "forward", "backward", "optimizer_step"]
    (validation,) = durations_ms(trace, "validation")
    assert validation > 0


# ---- faults ----------------------------------------------------------------------------------------------------------
def test_exception_mid_window_flushes_and_propagates_unchanged(tmp_path: Path) -> None:
    error = ValueError("user error at step 4")
    cb = callback(tmp_path / "perf")
    trainer = make_trainer(tmp_path, [cb, FailAt(4, error)])
    with pytest.raises(ValueError, match="user error at step 4") as raised:
        trainer.train()
    assert raised.value is error
    assert not torch.autograd.profiler._is_profiler_enabled
    (trace,) = cb.engine.exported
    assert trace.parent.name == "window-000003-000004" and profiler_steps(trace)[0] == 3
    assert cb.engine.nvtx.depth == 0
    assert "get_batch_samples" not in vars(trainer)


def test_sigterm_mid_window_flushes_then_exits_143(tmp_path: Path) -> None:
    from transformers import TrainerCallback

    class Preempt(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 4:
                assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, "SIGTERM would kill pytest"
                os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        cb = callback(tmp_path / "perf")
        with pytest.raises(SystemExit) as raised:
            make_trainer(tmp_path, [cb, Preempt()]).train()
        assert raised.value.code == 143
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored
    finally:
        signal.signal(signal.SIGTERM, before)
    (trace,) = cb.engine.exported
    assert trace.parent.name == "window-000003-000004" and profiler_steps(trace)[0] == 3


def test_keyboard_interrupt_mid_window_flushes(tmp_path: Path) -> None:
    cb = callback(tmp_path / "perf")
    with pytest.raises(KeyboardInterrupt):
        make_trainer(tmp_path, [cb, FailAt(4, KeyboardInterrupt())]).train()
    (trace,) = cb.engine.exported
    assert profiler_steps(trace)[0] == 3


# ---- metrics and checks ----------------------------------------------------------------------------------------------
def tb_scalars(logdir: Path) -> dict[str, list[int]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = list(logdir.rglob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events.parent))
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_metrics_go_to_report_to_integrations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))  # 5.x; 4.x takes TrainingArguments.logging_dir
    cb = callback(tmp_path / "perf", schedule={"skip_first": 100})
    four = {"logging_dir": str(tmp_path / "tb")} if "logging_dir" in TrainingArguments.__dataclass_fields__ else {}
    make_trainer(tmp_path, [cb], max_steps=6, report_to="tensorboard", **four).train()
    scalars = tb_scalars(tmp_path / "tb")
    assert scalars["train/loss"] == [2, 4, 6]  # the Trainer's own logs, same writer
    assert scalars["perf/memory/host_rss_mb"] == [2, 4, 6]  # our tags as under Lightning and Accelerate
    assert not any(tag.startswith("train/perf/") for tag in scalars)
    assert not list((tmp_path / "perf").rglob("events.out.tfevents.*"))


def test_a_window_summary_lands_at_the_step_after_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary is published when its background analysis is done, steps later: the integrations still log it at
    the step after the window (they read ``state.global_step``), and training's own step is left as it was."""
    from transformers import TrainerCallback

    class Slow(TrainerCallback):  # steps of 50 ms: the analysis finishes several steps after the window
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            import time

            time.sleep(0.05)

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    cb = callback(tmp_path / "perf", schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}, summary=True)
    four = {"logging_dir": str(tmp_path / "tb")} if "logging_dir" in TrainingArguments.__dataclass_fields__ else {}
    trainer = make_trainer(tmp_path, [cb, Slow()], max_steps=30, report_to="tensorboard", logging_steps=10, **four)
    trainer.train()
    scalars = tb_scalars(tmp_path / "tb")
    assert scalars["perf/window/step_time_ms"] == [5]  # the window's summary (steps 3-4)
    assert scalars["train/loss"] == [10, 20, 30] and trainer.state.global_step == 30


def test_the_window_summary_speaks_in_training_arguments(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """An input-bound window: the summary's advice names dataloader_num_workers, not the DataLoader's num_workers."""
    import re

    cb = callback(tmp_path / "perf", schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}, summary=True,
                  record_shapes=True)
    make_trainer(tmp_path, [cb], max_steps=6, sleep_ms=3.0).train()  # 4 samples of 3 ms per batch, no workers
    (summary,) = (tmp_path / "perf").rglob("summary.txt")
    text = summary.read_text()
    assert "verdict: input_bound" in text and "try dataloader_num_workers=" in text, text
    # the caveat of record_shapes fits the verdict: the loading ran in this process; no host-bound verdict to confirm
    assert "with dataloader_num_workers=0 the loading runs in this process, so the data wait is inflated" in text, text
    assert "host-bound" not in text, text
    (line,) = [x for x in capfd.readouterr().out.splitlines() if x.startswith("perf-callbacks: steps 3-4 ")]
    assert "input_bound: data wait " in line and "; try dataloader_num_workers=" in line, line  # the line too
    assert not re.search(r"(?<!dataloader_)(num_workers|pin_memory|persistent_workers)=", text), text


def test_metrics_go_to_our_own_events_when_nothing_is_configured(tmp_path: Path) -> None:
    cb = callback(tmp_path / "perf", schedule={"skip_first": 100}, log_every_n_steps=3)
    trainer = make_trainer(tmp_path, [cb], max_steps=6)
    trainer.train()
    # under the Trainer's logging_dir where it still has one (4.x), else in the run folder (5.x)
    logging_dir = getattr(trainer.args, "logging_dir", None)
    scalars = tb_scalars(Path(logging_dir) if logging_dir else cb.engine.layout.run_dir / "tensorboard")
    assert scalars["perf/memory/host_rss_mb"] == [3, 6]


def test_dataloader_advice_is_phrased_in_training_arguments(tmp_path: Path) -> None:
    cb = callback(tmp_path / "perf", check_dataloaders=True, schedule={"skip_first": 100}, data_wait_steps=3)
    with pytest.warns(DataLoaderWarning, match=r"dataloader_num_workers=0; data loading took \d+% .*try "
                      r"dataloader_num_workers=\d"):
        make_trainer(tmp_path, [cb], max_steps=5, sleep_ms=3.0).train()


# ---- two processes ---------------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
def test_two_processes_one_trace_per_rank_per_window(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "tests.integrations.hf_two_ranks", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    both = ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert windows(tmp_path / "perf") == {"window-000003-000004": both, "window-000006-000007": both}
    assert r0["steps"] == r1["steps"] == 8 and r0["world_size"] == 2
    (run,) = (tmp_path / "perf").iterdir()
    for w in ("window-000003-000004", "window-000006-000007"):
        assert profiler_steps(run / w / "rank0.pt.trace.json.gz") == profiler_steps(run / w / "rank1.pt.trace.json.gz")
    # the measured data-wait share warns once, on rank 0 only, in TrainingArguments terms
    assert len(r0["warnings"]) == 1 and "dataloader_num_workers=0; data loading took" in r0["warnings"][0]
    assert r1["warnings"] == []


class _OOMInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_out_of_memory_in_backward_names_the_backward_phase(tmp_path: Path) -> None:
    cb = callback(tmp_path / "perf")
    trainer = make_trainer(tmp_path, [cb], max_steps=8)
    calls = {"n": 0}

    def fail_at_the_third_forward(module: Any, args: Any, out: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return _OOMInBackward.apply(out) if calls["n"] == 3 else out

    trainer.model.layer.register_forward_hook(fail_at_the_third_forward)
    with pytest.raises(OutOfMemoryError, match="Tried to allocate 2.00 GiB"):
        trainer.train()
    (summary,) = (tmp_path / "perf").rglob("oom-rank0/summary.txt")
    assert summary.read_text().startswith("out of memory on rank 0 at step 2, phase backward\n")

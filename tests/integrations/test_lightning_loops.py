"""GPUPerfCallback next to other profilers and instances, and in loops unlike the README's (manual optimization with
two optimizers, a run shorter than the schedule). A case that used to abort training runs in a subprocess."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn

from perf_callbacks import GPUPerfCallback, InstrumentUnavailableWarning
from tests.integrations.lit_helpers import TinyModel, events, loader, profiler_steps, trainer

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"degradation_threshold": 1e6, "data_wait_steps": 100_000, "check_dataloaders": False,
         "log_min_interval_s": 0}  # every logging interval, as the tests count them


class GanModel(L.LightningModule):
    """Manual optimization, two optimizers stepping once each per training step (global_step moves by 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.g, self.d = nn.Linear(16, 16), nn.Linear(16, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, _ = batch
        opt_g, opt_d = self.optimizers()  # type: ignore[misc]
        self.manual_backward(self.d(self.g(x).detach()).mean())
        opt_d.step()
        opt_d.zero_grad()
        self.manual_backward(-self.d(self.g(x)).mean())
        opt_g.step()
        opt_g.zero_grad()

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.SGD(self.g.parameters(), lr=0.01), torch.optim.SGD(self.d.parameters(), lr=0.01)]


def test_manual_optimization_with_two_optimizers_counts_training_steps(tmp_path: Path) -> None:
    logged: list[int] = []

    class Recorder(L.pytorch.loggers.CSVLogger):
        def log_metrics(self, metrics: dict, step: int | None = None) -> None:
            if any(k.startswith("perf/memory/") for k in metrics):  # interval metrics, not window summaries
                logged.append(int(step or 0))

    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), log_every_n_steps=4,
                         schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 2, "repeat": 2}, **QUIET)
    t = trainer(tmp_path, [cb], max_steps=24, logger=Recorder(str(tmp_path)))  # 12 training steps
    t.fit(GanModel(), loader())
    assert t.global_step == 24
    (run,) = (tmp_path / "perf").iterdir()
    assert sorted(w.name for w in run.glob("window-*")) == ["window-000003-000004", "window-000006-000007"]
    for w in run.glob("window-*"):  # one trace per rank per window, one ProfilerStep per training step
        assert sorted(p.name for p in w.glob("*.gz")) == ["rank0.pt.trace.json.gz"]
    assert [profiler_steps(p) for p in cb.engine.exported] == [[3, 4], [6, 7]]
    assert logged == [4, 8, 12]  # every log_every_n_steps training steps (global_step only takes even values)


class AccumulatingGan(GanModel):
    """The two optimizers step every second batch: a batch that only accumulates moves neither global_step nor ours."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, _ = batch
        opt_g, opt_d = self.optimizers()  # type: ignore[misc]
        self.manual_backward(self.d(self.g(x).detach()).mean() - self.d(self.g(x)).mean())
        if batch_idx % 2 == 1:
            for opt in (opt_d, opt_g):
                opt.step()
                opt.zero_grad()


def test_manual_optimization_with_two_optimizers_and_accumulation_counts_stepping_batches(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"),
                         schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 2, "repeat": 2}, **QUIET)
    t = trainer(tmp_path, [cb], max_steps=24)  # 12 training steps of 2 batches each
    t.fit(AccumulatingGan(), loader())
    assert t.global_step == 24
    assert [profiler_steps(p) for p in cb.engine.exported] == [[3, 4], [6, 7]]
    for path in cb.engine.exported:  # each recorded step holds its two batches
        assert sum(e.get("name") == "perf_callbacks.backward" for e in events(path)) == 4


def test_a_second_callback_on_one_trainer_stands_aside(tmp_path: Path) -> None:
    schedule = {"skip_first": 0, "wait": 0, "warmup": 0, "active": 3}
    first = GPUPerfCallback(output_dir=str(tmp_path / "a"), schedule=schedule, **QUIET)
    second = GPUPerfCallback(output_dir=str(tmp_path / "b"), schedule=schedule, **QUIET)
    with pytest.warns(InstrumentUnavailableWarning, match="a second GPUPerfCallback is on this Trainer") as seen:
        trainer(tmp_path, [first, second], max_steps=5).fit(TinyModel(), loader())
    assert len([w for w in seen if issubclass(w.category, InstrumentUnavailableWarning)]) == 1
    assert [profiler_steps(p) for p in first.engine.exported] == [[0, 1, 2]]
    assert second.engine is None and not (tmp_path / "b").exists()


LIGHTNING_PROFILER_SCRIPT = """
import sys, warnings
from perf_callbacks import GPUPerfCallback
from tests.integrations.lit_helpers import TinyModel, loader, trainer
from pathlib import Path

out = Path(sys.argv[1])
schedule = {"skip_first": 0, "wait": 0, "warmup": 0, "active": 3} if sys.argv[2] == "step0" else None
cb = GPUPerfCallback(output_dir=str(out / "perf"), **({"schedule": schedule} if schedule else {}))
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    trainer(out, [cb], max_steps=20, profiler="pytorch").fit(TinyModel(), loader())
print("WARNINGS", [str(w.message) for w in seen if "perf-callbacks" in str(w.message)])
"""


@pytest.mark.parametrize("when", ["step0", "default"])
def test_lightning_pytorch_profiler_and_ours_training_completes(tmp_path: Path, when: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", LIGHTNING_PROFILER_SCRIPT, str(tmp_path), when], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("WARNINGS")]
    assert line.count("Trainer(profiler=PyTorchProfiler)") == 1  # one warning naming the other profiler
    assert not list((tmp_path / "perf").rglob("*.pt.trace.json.gz"))  # so no trace mixes two profilers' steps


class ProfilesItself(TinyModel):
    """The user's own torch.profiler, started and stopped inside training_step, in the middle of our window."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == 4:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
                return super().training_step(batch, batch_idx)
        return super().training_step(batch, batch_idx)


def test_a_user_profiler_inside_our_window_never_breaks_a_hook(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path), schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 4},
                         **QUIET)
    # the user's profiler ends ours too (torch has one profiler state); exporting ours then segfaulted in torch
    with pytest.warns(InstrumentUnavailableWarning, match="another torch.profiler was started and stopped") as seen:
        trainer(tmp_path, [cb], max_steps=10).fit(ProfilesItself(), loader())
    ours = [w for w in seen if issubclass(w.category, InstrumentUnavailableWarning)]
    assert len(ours) == 1 and ours[0].filename == __file__
    assert not torch.autograd.profiler._is_profiler_enabled
    assert cb.engine.exported == []


def test_a_run_shorter_than_the_schedule_says_so(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path), **QUIET)  # the default schedule starts its window at step 12
    trainer(tmp_path, [cb], max_steps=5).fit(TinyModel(), loader())
    err = capfd.readouterr().err
    assert "perf-callbacks: no profiling window was recorded: 5 optimizer steps ran" in err
    assert "first window starts at step 12" in err and err.count("no profiling window") == 1


def test_resume_with_manual_optimization_continues_the_count(tmp_path: Path) -> None:
    schedule = {"skip_first": 6, "wait": 0, "warmup": 1, "active": 2}
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule=schedule, **QUIET)
    t = trainer(tmp_path, [cb], max_steps=8, enable_checkpointing=True)  # 4 training steps
    t.fit(GanModel(), loader())
    ckpt = tmp_path / "resume.ckpt"
    t.save_checkpoint(ckpt)
    assert torch.load(ckpt, weights_only=False)["perf_callbacks"] == {"steps": 4}
    cb2 = GPUPerfCallback(output_dir=str(tmp_path / "perf2"), schedule=schedule, **QUIET)
    trainer(tmp_path, [cb2], max_steps=20).fit(GanModel(), loader(), ckpt_path=str(ckpt))
    assert [profiler_steps(p) for p in cb2.engine.exported] == [[7, 8]]
    data = json.load(gzip.open(cb2.engine.exported[0]))
    assert data["distributedInfo"]["rank"] == 0

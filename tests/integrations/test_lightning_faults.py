"""Never harm the run: interrupts, preemption, unwritable output, long runs (Lightning adapter)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from perf_callbacks import GPUPerfCallback, InstrumentUnavailableWarning
from perf_callbacks.core.memory.sampler import host_rss_bytes
from tests.integrations.lit_helpers import TinyModel, loader, profiler_steps, trainer

WINDOW = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 4}


class Interrupting(TinyModel):
    def __init__(self, at_step: int, how: str) -> None:
        super().__init__()
        self.at_step, self.how = at_step, how

    def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
        if self.trainer.global_step == self.at_step:
            if self.how == "ctrl-c":
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGTERM)  # preemption: Lightning stops after this batch
        return super().training_step(batch, batch_idx)


@pytest.fixture
def restore_signals():  # noqa: ANN201
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.mark.usefixtures("restore_signals")
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupt_mid_window_flushes_the_trace(tmp_path: Path, how: str) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path), schedule=WINDOW, check_dataloaders=False)
    with pytest.raises(SystemExit):  # Lightning: sys.exit(1) after Ctrl-C, SIGTERMException(SystemExit) on SIGTERM
        trainer(tmp_path, [cb], max_steps=20).fit(Interrupting(at_step=4, how=how), loader())
    assert not torch.autograd.profiler._is_profiler_enabled
    (path,) = cb.engine.exported
    assert profiler_steps(path)[0] == 3
    assert "interrupted by" in (path.parent / "summary.txt").read_text()
    assert cb.engine.nvtx.depth == 0


def test_unwritable_output_dir_warns_once_and_training_completes(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    cb = GPUPerfCallback(output_dir=str(not_a_dir), check_dataloaders=False,
                         schedule={"skip_first": 1, "wait": 0, "warmup": 0, "active": 1, "repeat": 0})
    t = trainer(tmp_path, [cb], max_steps=8)
    with pytest.warns(InstrumentUnavailableWarning, match="profiler disabled") as rec:
        t.fit(TinyModel(), loader())
    assert t.global_step == 8
    assert len([w for w in rec if issubclass(w.category, InstrumentUnavailableWarning)]) == 1


@pytest.mark.slow
def test_host_memory_stays_flat_over_2000_steps_and_10_windows(tmp_path: Path) -> None:
    """RSS growth between the end of the first window and the end of the run stays under 40 MB."""

    class RssProbe(GPUPerfCallback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            if trainer.global_step == 300:
                self.rss_after_first_windows = host_rss_bytes()

    sched = {"skip_first": 10, "wait": 190, "warmup": 1, "active": 2, "repeat": 10}  # windows every 193 steps
    cb = RssProbe(output_dir=str(tmp_path), schedule=sched, check_dataloaders=False,  # default summary: on
                 data_wait_threshold=1.0, degradation_threshold=100.0)
    trainer(tmp_path, [cb], max_steps=2000, log_every_n_steps=50).fit(TinyModel(), loader(n=2048))
    growth_mb = (host_rss_bytes() - cb.rss_after_first_windows) / 2**20
    print(f"RSS growth over steps 300-2000: {growth_mb:.1f} MB, windows: {len(cb.engine.exported)}")
    assert len(cb.engine.exported) == 10
    assert len(list(tmp_path.rglob("summary.txt"))) == 10  # every window was analysed and summarised
    assert growth_mb < 40


def test_a_failed_fit_leaves_no_save_checkpoint_wrapper(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule=WINDOW, check_dataloaders=False)
    t = trainer(tmp_path, [cb], max_steps=20)
    with pytest.raises(ValueError, match="user error at step 4"):
        t.fit(TinyModel(fail_at_step=4), loader())
    assert "save_checkpoint" not in vars(t)
    t.save_checkpoint(tmp_path / "after.ckpt")  # the Trainer's own method, not one bound to the closed engine
    assert torch.load(tmp_path / "after.ckpt", weights_only=False)["global_step"] == 4

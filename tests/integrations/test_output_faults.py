"""A failing output folder never reaches training, under every adapter (issue 22, part 1).

The run folder deleted or replaced by a file mid-training, and the output on a full 64 KiB disk (a real tmpfs,
``tests/small_fs.py``): training completes, the code after the ``with`` block runs, each failing writer says once
why it stopped (errno name and path), nothing half-written is left (no ``.partial``, ``.tmp`` or raw file, no empty
or truncated event file), and no thread dies with a traceback.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks import AcceleratePerfHook, GPUPerfCallback, InstrumentUnavailableWarning
from tests.integrations.lit_helpers import TinyModel, loader, trainer
from tests.small_fs import fill

pytest.importorskip("transformers")
from transformers import TrainerCallback  # noqa: E402

from perf_callbacks import TransformersPerfCallback  # noqa: E402
from tests.integrations.hf_helpers import QUIET, make_trainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # conftest.py
LATE_WINDOW = {"skip_first": 5, "wait": 0, "warmup": 1, "active": 2}  # records steps 6-7, after the damage at 3
BIG_WINDOW = {"skip_first": 1, "wait": 0, "warmup": 0, "active": 8, "repeat": 1}  # its raw export exceeds 64 KiB


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """What would be printed as ``Exception in thread ...``: must stay empty."""
    died: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    yield died
    assert [f"{d.thread.name}: {d.exc_type.__name__}: {d.exc_value}" for d in died] == []


def damage(run: Path, how: str) -> None:
    shutil.rmtree(run, ignore_errors=True)  # Lightning's is made at the first window
    if how == "replaced by a file":
        run.parent.mkdir(parents=True, exist_ok=True)
        run.write_text("not a folder")


def messages(record: Any) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, InstrumentUnavailableWarning)]


def leftovers(root: Path) -> list[str]:
    """Hidden or scratch files, and event files that are empty or end in a cut record."""
    bad = [str(p) for p in root.rglob("*") if p.name.startswith(".") or p.name.endswith((".partial", ".tmp"))]
    return bad + [f"{p} ({n} scalars)" for p in root.rglob("events.out.tfevents.*") if (n := event_count(p)) is None]


def event_count(path: Path) -> int | None:
    """The scalar records in an event file, None if it is empty or its last record is cut."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event

    records = list(RawEventFileLoader(str(path)).Load())  # stops before a cut record: compare sizes to catch one
    if not records or sum(len(r) + 16 for r in records) != path.stat().st_size:  # 16: length, 2 CRCs
        return None
    return sum(len(Event.FromString(r).summary.value) for r in records)


# ---- our event file ----------------------------------------------------------------------------------------------
def test_an_event_file_that_cannot_start_leaves_no_file_and_no_folder(small_fs: Path) -> None:
    from perf_callbacks.core.files.outputs import Outputs
    from perf_callbacks.integrations._events import EventFile

    fill(small_fs)
    events = EventFile(small_fs / "run" / "tensorboard", Outputs())
    with pytest.warns(InstrumentUnavailableWarning, match=r"^perf-callbacks: TensorBoard events disabled: No space left "
                      r"on device \(ENOSPC\): .*/run/tensorboard/events\.out\.tfevents\.[^;]*; training continues$"):
        events.scalars({"perf/a": 1.0}, 2)
        events.text("perf/summary", "text", 3)  # off: not tried again
    assert sorted(p.name for p in small_fs.iterdir()) == ["filler"]  # was: a 0-byte event file


def test_an_event_file_cut_by_a_full_disk_keeps_its_whole_records(small_fs: Path) -> None:
    from perf_callbacks.core.files.outputs import Outputs
    from perf_callbacks.integrations._events import EventFile

    events = EventFile(small_fs / "tensorboard", Outputs())
    events.scalars({"perf/a": 1.0}, 1)
    fill(small_fs)
    with pytest.warns(InstrumentUnavailableWarning, match="No space left on device"):
        for step in range(2, 200):  # the page the file already has takes some; the first write past it fails
            events.scalars({f"perf/metric_{i}": float(i) for i in range(10)}, step)
    assert events.path is not None and (event_count(events.path) or 0) >= 11  # perf/a, then whole 10-scalar writes
    assert (event_count(events.path) or 0) % 10 == 1 and leftovers(small_fs) == []


# ---- Accelerate --------------------------------------------------------------------------------------------------
def accelerate_run(out: Path, at_step3: Any = None, **options: Any) -> tuple[AcceleratePerfHook, bool]:
    acc = Accelerator(cpu=True)
    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)), batch_size=4)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data)
    options = {"output_dir": str(out), "schedule": LATE_WINDOW, "log_every_n_steps": 2, "check_dataloaders": False,
               "degradation_threshold": 1e6, "log_min_interval_s": 0, **options}
    with AcceleratePerfHook(**options).register(acc) as hook:
        for x, y in hook.iter(dl):
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
            if hook.optimizer_steps == 3 and at_step3 is not None:
                at_step3(hook)
    after_with = True  # was: NotADirectoryError from hook.iter, OSError ENOSPC from __exit__
    return hook, after_with


@pytest.mark.parametrize("how", ["deleted", "replaced by a file"])
def test_accelerate_run_folder_damaged_after_step_2(tmp_path: Path, how: str, thread_errors: list[Any]) -> None:
    with pytest.warns(InstrumentUnavailableWarning) as record:
        hook, after_with = accelerate_run(tmp_path / "perf", lambda h: damage(h.engine.layout.run_dir, how))
    assert after_with and hook.optimizer_steps == 16
    run = hook.engine.layout.run_dir
    errno = {"deleted": r"No such file or directory \(ENOENT\)", "replaced by a file": r"Not a directory \(ENOTDIR\)"}
    events = rf"{errno[how]}: {run}/tensorboard/events\.out\.tfevents\.[^;]*; training continues$"
    expected = [rf"^perf-callbacks: TensorBoard events disabled: {events}"]
    if how == "replaced by a file":  # the window after it cannot be written either; deleted, its folder is made anew
        expected.append(rf"^perf-callbacks: profiler disabled: {errno[how]}: {run}/window-000006-000007; training "
                        "continues$")
    said = messages(record)
    assert len(said) == len(expected) and all(any(re.match(e, m) for m in said) for e in expected), said
    if how == "deleted":
        assert [p.name for p in hook.engine.exported] == ["rank0.pt.trace.json.gz"] and leftovers(run) == []


def test_accelerate_output_on_a_full_disk(small_fs: Path, thread_errors: list[Any]) -> None:
    filler: list[Path] = []
    with pytest.warns(InstrumentUnavailableWarning) as record:  # the disk fills up after the first metrics
        hook, after_with = accelerate_run(small_fs / "perf", lambda h: filler.append(fill(small_fs)),
                                          log_every_n_steps=1)
    assert after_with and hook.optimizer_steps == 16
    run = hook.engine.layout.run_dir
    events, profiler = sorted(messages(record))  # the window at steps 6-7, and the first write past a full page
    assert profiler == (f"perf-callbacks: profiler disabled: No space left on device (ENOSPC): "
                        f"{run}/window-000006-000007/.rank0.raw.partial; training continues")
    assert events.startswith(f"perf-callbacks: TensorBoard events disabled: No space left on device (ENOSPC): "
                             f"{run}/tensorboard/events.out.tfevents."), events
    filler[0].unlink()
    assert leftovers(small_fs) == [] and not (run / "window-000006-000007").exists()
    (events,) = (run / "tensorboard").iterdir()
    assert (event_count(events) or 0) >= 10  # the steps logged before the disk was full, every record whole


def test_accelerate_state_file_that_cannot_be_written_never_fails_the_users_save(tmp_path: Path,
                                                                                   thread_errors: list[Any]) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "perf_callbacks_state.json").mkdir(parents=True)  # our file cannot take that name; the user's save can

    def save(hook: AcceleratePerfHook) -> None:
        hook.accelerator.save_state(str(ckpt))  # was: IsADirectoryError out of the user's save_state

    with pytest.warns(InstrumentUnavailableWarning) as record:
        hook, after_with = accelerate_run(tmp_path / "perf", save, schedule={"skip_first": 100})
    assert after_with and hook.optimizer_steps == 16
    assert messages(record) == [f"perf-callbacks: the step count is no longer saved next to checkpoints: Is a directory "
                                f"(EISDIR): {ckpt / 'perf_callbacks_state.json'}; it still travels in the optimizer "
                                "state; training continues"]
    assert (ckpt / "model.safetensors").exists() and leftovers(ckpt) == []


# ---- transformers ------------------------------------------------------------------------------------------------
class AtStep(TrainerCallback):  # type: ignore[misc]
    """Runs ``fn(callback)`` at the end of optimizer step ``step``."""

    def __init__(self, step: int, fn: Any, perf: TransformersPerfCallback) -> None:
        self.step, self.fn, self.perf = step, fn, perf

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            self.fn(self.perf)


def finish_window_jobs(cb: TransformersPerfCallback) -> None:
    """Let the window's background job finish now, so its summary is published at the next step, mid-training."""
    for job in list(cb.engine.windows.handoff.jobs):
        job.join(120)


def test_transformers_run_folder_deleted_mid_training(tmp_path: Path, thread_errors: list[Any]) -> None:
    cb = TransformersPerfCallback(output_dir=str(tmp_path / "perf"), schedule=LATE_WINDOW, log_every_n_steps=2,
                                  **QUIET)

    def events_dir() -> Path:  # under args.logging_dir where the Trainer still has one (4.x), else in the run folder
        return Path(getattr(trainer.args, "logging_dir", None) or cb.engine.layout.run_dir / "tensorboard")

    def delete(perf: TransformersPerfCallback) -> None:
        damage(perf.engine.layout.run_dir, "deleted")
        shutil.rmtree(events_dir(), ignore_errors=True)

    trainer = make_trainer(tmp_path / "hf", [cb, AtStep(3, delete, cb), AtStep(8, finish_window_jobs, cb)],
                           max_steps=12)
    with pytest.warns(InstrumentUnavailableWarning) as record:
        trainer.train()  # was: FileNotFoundError from the summary's scalars (engine.data_start -> windows.poll)
    assert trainer.state.global_step == 12
    (said,) = messages(record)
    assert said.startswith(f"perf-callbacks: TensorBoard events disabled: No such file or directory (ENOENT): "
                           f"{events_dir()}/events.out.tfevents."), said
    assert len(cb.engine.windows.handoff.summaries) == 1  # published at step 9, during training
    assert leftovers(tmp_path) == []


# ---- every adapter on a full disk --------------------------------------------------------------------------------
def lightning_fit(out: Path) -> int:
    cb = GPUPerfCallback(output_dir=str(out), schedule=BIG_WINDOW, check_dataloaders=False)
    t = trainer(out.parent.parent, [cb], max_steps=12)
    t.fit(TinyModel(), loader())
    return int(t.global_step)


def accelerate_fit(out: Path) -> int:
    hook, _ = accelerate_run(out, schedule=BIG_WINDOW, log_every_n_steps=4)
    return hook.optimizer_steps


def transformers_fit(out: Path) -> int:
    cb = TransformersPerfCallback(output_dir=str(out), schedule=BIG_WINDOW, log_every_n_steps=4, **QUIET)
    trainer = make_trainer(out.parent.parent / "hf", [cb], max_steps=12)
    trainer.train()
    return int(trainer.state.global_step)


@pytest.mark.parametrize("fit", [lightning_fit, accelerate_fit, transformers_fit], ids=["lightning", "accelerate",
                                                                                       "transformers"])
def test_a_window_that_fills_the_disk_names_enospc_and_leaves_nothing(small_fs: Path, fit: Any,
                                                                      thread_errors: list[Any]) -> None:
    with pytest.warns(InstrumentUnavailableWarning) as record:
        steps = fit(small_fs / "perf")
    assert steps >= 12
    (said,) = messages(record)  # was: "FileNotFoundError: ... .rank0.raw.partial", and a 64 KiB .tmp left behind
    assert said.startswith("perf-callbacks: profiler disabled: No space left on device (ENOSPC): "), said
    assert said.endswith("/window-000001-000008/.rank0.raw.partial; training continues"), said
    assert leftovers(small_fs) == [] and not list(small_fs.rglob("window-*"))


# ---- Lightning: the same guard -----------------------------------------------------------------------------------
def test_lightning_run_folder_replaced_by_a_file(tmp_path: Path, thread_errors: list[Any]) -> None:
    class Replacing(L.Callback):
        def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
            if trainer.global_step == 3:
                damage(cb.engine.layout.run_dir, "replaced by a file")

    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule=LATE_WINDOW, check_dataloaders=False)
    t = trainer(tmp_path, [cb, Replacing()], max_steps=12)
    with pytest.warns(InstrumentUnavailableWarning) as record:
        t.fit(TinyModel(), loader())
    assert t.global_step == 12
    assert messages(record) == [f"perf-callbacks: profiler disabled: Not a directory (ENOTDIR): "
                                f"{cb.engine.layout.run_dir}/window-000006-000007; training continues"]


def test_lightning_logger_that_fails_turns_metrics_off_once(tmp_path: Path, thread_errors: list[Any]) -> None:
    from lightning.pytorch.loggers import Logger

    class FullDiskLogger(Logger):  # type: ignore[misc]
        name, version, calls = "full", 0, 0

        def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
            pass

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            FullDiskLogger.calls += 1
            raise OSError(28, "No space left on device", str(tmp_path / "logs" / "metrics.csv"))

    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 100}, log_every_n_steps=2,
                         check_dataloaders=False)
    t = trainer(tmp_path, [cb], max_steps=8, logger=FullDiskLogger())
    with pytest.warns(InstrumentUnavailableWarning) as record:
        t.fit(TinyModel(), loader())
    assert t.global_step == 8 and FullDiskLogger.calls == 1  # not called again once off
    assert messages(record) == [f"perf-callbacks: metrics disabled: No space left on device (ENOSPC): "
                                f"{tmp_path / 'logs' / 'metrics.csv'}; training continues"]

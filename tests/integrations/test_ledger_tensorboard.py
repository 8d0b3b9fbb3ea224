"""``perf/ledger/*`` in TensorBoard: a real Lightning run's interval shares, read back from its event file.

A checkpoint every step that sleeps 0.1 s: each logged interval's ``perf/ledger/checkpoint`` is the saves' share of
that interval's wall time, both read on the test's own clock (the saves, and the step ends right before each logging).
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger

from perf_callbacks import GPUPerfCallback
from tests.integrations.ledger_helpers import Marks, Planted, SaveTimes, SlowSave
from tests.integrations.lit_helpers import TinyModel, loader, trainer

EVERY = 4
PARTS = {"productive", "data_wait", "own", "other"}  # every interval; the set-aside kinds once the run had some


def scalars(logdir: Path) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of the ``perf/ledger/`` scalars under ``logdir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [folder] = {p.parent for p in logdir.rglob("events.out.tfevents.*")}
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"] if t.startswith("perf/ledger/")}


def fit(tmp_path: Path, ckpt_s: float) -> tuple[dict[str, dict[int, float]], Marks, SaveTimes | None]:
    planted, marks = Planted(), Marks()
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 10_000}, summary=False,
                         check_dataloaders=False, log_min_interval_s=0)
    saves = SaveTimes(planted, dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1) if ckpt_s else None
    extra: list[Callback] = [SlowSave(planted, ckpt_s), saves] if saves is not None else []
    trainer(tmp_path, [marks, cb, *extra], logger=logger, log_every_n_steps=EVERY, max_steps=3 * EVERY,
            enable_checkpointing=bool(ckpt_s), limit_val_batches=0).fit(TinyModel(), loader())
    return scalars(Path(logger.log_dir)), marks, saves


def test_a_checkpoint_every_step_is_its_share_of_each_interval(tmp_path: Path) -> None:
    found, marks, saves = fit(tmp_path, ckpt_s=0.1)
    assert saves is not None and len(saves.saves) == 3 * EVERY
    assert set(found) == {f"perf/ledger/{p}" for p in (*PARTS, "checkpoint")}
    steps = [EVERY, 2 * EVERY, 3 * EVERY]
    for tag in found:
        assert sorted(found[tag]) == steps, (tag, found[tag])
    for prev, step in zip([None, *steps], steps, strict=False):
        assert abs(sum(found[t][step] for t in found) - 1.0) < 1e-4
        if prev is None:  # the first interval starts at the first step, which the test does not mark
            continue
        t0, t1 = marks.at[prev], marks.at[step]
        saved = sum(s for start, s in saves.saves if t0 < start < t1)
        truth = saved / (t1 - t0)
        assert saved > 0.3  # four saves of at least 0.1 s each
        assert abs(found["perf/ledger/checkpoint"][step] - truth) <= 0.03, (step, found, truth)


def test_without_checkpoints_or_evaluation_their_shares_are_not_logged(tmp_path: Path) -> None:
    found, _, _ = fit(tmp_path, ckpt_s=0.0)
    assert set(found) == {f"perf/ledger/{p}" for p in PARTS}
    for step in (EVERY, 2 * EVERY, 3 * EVERY):
        assert abs(sum(found[t][step] for t in found) - 1.0) < 1e-4
        assert found["perf/ledger/productive"][step] > 0

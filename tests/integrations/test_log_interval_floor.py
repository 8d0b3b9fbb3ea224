"""``log_min_interval_s`` in each adapter: a real fast CPU loop logs its first two intervals, then no more often than
the floor (here an hour: never again in the run); ``0`` logs at every ``log_every_n_steps``-th step. A multi-process
Accelerate run gathers its interval across ranks at every logging step (a collective every rank must join), so it
takes no floor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integrations.acc_helpers import tb_scalars

NO_WINDOW = {"skip_first": 10**6}
HOUR = 3600.0


def lightning_steps(tmp_path: Path, floor: float) -> list[int]:
    from lightning.pytorch.loggers import TensorBoardLogger

    from perf_callbacks import GPUPerfCallback
    from tests.integrations.lit_helpers import TinyModel, loader, trainer

    logger = TensorBoardLogger(str(tmp_path), name="tb")
    cb = GPUPerfCallback(schedule=NO_WINDOW, check_dataloaders=False, summary=False, log_min_interval_s=floor)
    trainer(tmp_path, [cb], logger=logger, log_every_n_steps=4, max_steps=24).fit(TinyModel(), loader())
    return tb_scalars(Path(logger.log_dir))["perf/train/step_time_ms"]


def test_lightning_logs_at_the_floor(tmp_path: Path) -> None:
    assert lightning_steps(tmp_path / "hour", HOUR) == [4, 8]
    assert lightning_steps(tmp_path / "none", 0.0) == [4, 8, 12, 16, 20, 24]


@pytest.mark.usefixtures("fresh_accelerate_state")
@pytest.mark.parametrize(("floor", "expected"), [(HOUR, [4, 8]), (0.0, [4, 8, 12, 16])])
def test_accelerate_logs_at_the_floor(tmp_path: Path, floor: float, expected: list[int]) -> None:
    from tests.integrations.acc_helpers import setup, train

    acc, hook, parts = setup(tmp_path, schedule=NO_WINDOW, log_every_n_steps=4, log_min_interval_s=floor)  # 16 steps
    with hook:
        train(acc, hook, parts)
    assert hook.engine.intervals.min_interval_s == floor  # one process: the configured floor
    assert tb_scalars(hook.engine.layout.run_dir / "tensorboard")["perf/train/step_time_ms"] == expected


@pytest.mark.parametrize(("floor", "expected"), [(HOUR, [4, 8]), (0.0, [4, 8, 12, 16])])
def test_transformers_logs_at_the_floor(tmp_path: Path, floor: float, expected: list[int]) -> None:
    pytest.importorskip("transformers")
    from tests.integrations.hf_helpers import QUIET, callback, make_trainer

    options: dict[str, Any] = {**QUIET, "schedule": NO_WINDOW, "log_every_n_steps": 4, "log_min_interval_s": floor}
    cb = callback(tmp_path / "perf", **options)
    trainer = make_trainer(tmp_path, [cb], max_steps=16)
    trainer.train()
    logging_dir = getattr(trainer.args, "logging_dir", None)  # 4.x; 5.x: our own events in the run folder
    scalars = tb_scalars(Path(logging_dir) if logging_dir else cb.engine.layout.run_dir / "tensorboard")
    assert scalars["perf/train/step_time_ms"] == expected

"""LightningCLI: the callback, schedule included, configured from a YAML file."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.cli import LightningCLI

from perf_callbacks import GPUPerfCallback, PerfConfigError
from tests.integrations.lit_helpers import TinyModel, loader, profiler_steps


class TinyData(L.LightningDataModule):
    def train_dataloader(self):  # noqa: ANN201
        return loader(num_workers=1)


def write_config(tmp_path: Path, init_args: str) -> Path:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"""
trainer:
  max_steps: 6
  accelerator: cpu
  devices: 1
  logger: false
  enable_progress_bar: false
  enable_checkpointing: false
  enable_model_summary: false
  default_root_dir: {tmp_path}
  callbacks:
    - class_path: perf_callbacks.GPUPerfCallback
      init_args:
{init_args}
""")
    return cfg


def run_cli(cfg: Path) -> LightningCLI:
    return LightningCLI(TinyModel, TinyData, args=["fit", "--config", str(cfg)], save_config_callback=None)


def test_cli_yaml_with_schedule(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, f"""        output_dir: {tmp_path / 'perf'}
        schedule: {{skip_first: 2, wait: 0, warmup: 1, active: 2}}
        record_shapes: true
        data_wait_steps: 1000
""")
    cli = run_cli(cfg)
    (cb,) = [c for c in cli.trainer.callbacks if isinstance(c, GPUPerfCallback)]
    assert cb.config.schedule.active == 2 and cb.config.record_shapes
    (path,) = cb.engine.exported
    assert profiler_steps(path) == [3, 4]


def test_cli_yaml_bad_schedule_names_the_key(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, "        schedule: {active: 0}\n")
    with pytest.raises((PerfConfigError, SystemExit, ValueError)) as info:
        run_cli(cfg)
    text = str(info.value) + str(info.value.__cause__ or "") + str(info.value.__context__ or "")
    assert "schedule.active must be >= 1, got 0" in text

"""The run's ledger so far in a window's sidecar (``rank{R}.summary.json``), from a real Lightning run.

A checkpoint every step that sleeps 0.1 s and a profiled window at steps 6-7: the window's sidecar holds the ledger up
to the window's end (``so_far``), whose checkpoint part is the saves before it on the test's own clock, and whose parts
add up to its wall time; the run's ledger at close is longer and holds every save. A run that did not close: ``report``
shows that ledger so far.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from lightning.pytorch.callbacks import Callback

from perf_callbacks import GPUPerfCallback
from perf_callbacks.analysis.ledger.text import run_ledgers
from perf_callbacks.cli import EXIT_OK, main
from tests.integrations.ledger_helpers import Planted, SaveTimes, SlowSave
from tests.integrations.lit_helpers import TinyModel, loader, trainer


class WindowEnd(Callback):
    """The test's clock when step 7 (the window's last) starts its ``on_train_batch_end``: the window ends after it."""

    def __init__(self) -> None:
        self.t: float | None = None

    def on_train_batch_end(self, trainer, *args) -> None:  # noqa: ANN001, ANN002
        if trainer.global_step == 8:
            self.t = time.perf_counter()


def test_a_window_s_sidecar_holds_the_ledger_so_far(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planted, end = Planted(), WindowEnd()
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 6, "wait": 0, "warmup": 0,
                                                                      "active": 2, "repeat": 1},
                         check_dataloaders=False)
    saves = SaveTimes(planted, dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1)
    trainer(tmp_path, [end, cb, SlowSave(planted, 0.1), saves], max_steps=12, enable_checkpointing=True,
            limit_val_batches=0).fit(TinyModel(), loader())
    [sidecar] = list((tmp_path / "perf").rglob("rank0.summary.json"))
    data = json.loads(sidecar.read_text())
    assert "ledger_so_far" not in data["meta"]
    led = data["ledger"]
    assert led["so_far"] is True and led["steps"] == 8  # steps 0-7: the window's last is open, past its optimizer step
    assert abs(sum(led["parts"].values()) - led["wall_s"]) < 1e-3
    assert abs(led["parts"]["unaccounted"]) <= 0.01 * led["wall_s"]
    assert end.t is not None
    before = sum(s for start, s in saves.saves if start < end.t)  # steps 0-6's saves: step 7's runs after the window
    assert len([s for s in saves.saves if s[0] < end.t]) == 7
    assert abs(led["parts"]["checkpoint"] - before) <= max(0.05 * before, 0.05), (led["parts"], before)
    [final] = run_ledgers(tmp_path / "perf")
    assert final.wall_s > led["wall_s"] and final.steps == 12
    assert final.parts["checkpoint"] > led["parts"]["checkpoint"] + 0.4  # the five saves after it
    # the run as if it had not closed (killed, or still running): report shows the ledger so far, without advice
    description = next((tmp_path / "perf").rglob("steps-rank0.json"))
    meta = json.loads(description.read_text())
    del meta["ledger"]["close_s"], meta["ledger"]["close_begin_s"]
    description.write_text(json.dumps(meta))
    assert run_ledgers(tmp_path / "perf") == []
    capsys.readouterr()
    assert main(["report", str(tmp_path / "perf"), "--json"]) == EXIT_OK
    shown = json.loads(capsys.readouterr().out)["ledger"]
    assert shown["so_far"] is True and shown["advice"] == [] and shown["steps"] == 8
    assert shown["parts"] == led["parts"] and shown["wall_s"] == led["wall_s"]
    assert main(["report", str(tmp_path / "perf")]) == EXIT_OK
    assert "ledger so far (to the last window; the run did not close): " in capsys.readouterr().out

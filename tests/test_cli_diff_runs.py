"""``perf-callbacks diff`` over whole runs (the default): real Lightning runs on CPU, compared from their step records.

Each pair is trained in this process, one run after the other; the change each test makes is far larger than what the
machine can do to a run (a batch 64 times larger, a 30 ms sleep per step in a checkpoint save), so the interval does
not depend on this machine's speed or load. Where the machine's load changed between the two runs (another job took
the cores), the call is withheld, as it should be: the tests accept that, and only that, in place of `improvement`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
from lightning.pytorch.callbacks import ModelCheckpoint

from perf_callbacks import GPUPerfCallback
from perf_callbacks.cli import main
from tests.integrations.lit_helpers import TinyModel, loader, trainer

NO_WINDOW = {"schedule": {"skip_first": 100_000}, "summary": False}


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread, as OMP_NUM_THREADS=1 gives the runs of test_cli_diff.py: on a loaded 2-core machine two
    threads spin for each other (batch-64 steps of this tiny model took 81 ms against 1.2 ms with one thread)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class SlowSave(TinyModel):
    """A model whose checkpoint save takes 30 ms more (a slow filesystem): set aside by the callback."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        import time

        time.sleep(0.03)


def fit(out: Path, batch: int, steps: int = 150, model: L.LightningModule | None = None,
        checkpoint_every_step: bool = False) -> Path:
    cb = GPUPerfCallback(output_dir=str(out / "perf"), **NO_WINDOW)  # type: ignore[arg-type]
    callbacks: list[Any] = [cb]
    if checkpoint_every_step:
        callbacks.append(ModelCheckpoint(dirpath=str(out / "ckpt"), every_n_train_steps=1, save_top_k=1))
    t = trainer(out, callbacks, max_steps=steps, enable_checkpointing=checkpoint_every_step, limit_val_batches=0)
    t.fit(model or TinyModel(), loader(n=steps * batch, batch_size=batch))
    return out / "perf"


def _contention_moved(d: dict[str, Any]) -> bool:
    """The machine's load changed between the two runs (the CI machine is shared): the call is rightly withheld."""
    return bool(d["withheld"]) and any(x["what"] == "cpu_contention" for x in d["machine"])


def diff(capsys: pytest.CaptureFixture[str], base: Path, new: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    code = main(["diff", str(base), str(new), "--json", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


@pytest.mark.filterwarnings("ignore::perf_callbacks.exceptions.PerfWarning")  # e.g. a tiny model's loader advice
def test_batch_1_to_64_is_an_improvement_per_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, new = fit(tmp_path / "b1", batch=1), fit(tmp_path / "b64", batch=64)
    code, d, _ = diff(capsys, base, new)
    assert code == 0
    assert d["unit"] == "time per sample" and d["ci_high"] < -d["threshold"] and d["effect"] < -0.5, d
    assert d["call"] == "improvement" or _contention_moved(d), d
    assert d["machine_differs"] and any(x["what"] == "batch" and x["new"] == 64 for x in d["machine"])
    assert {"unit", "effect", "ci_low", "ci_high", "threshold", "call", "steps_to_decide",
            "machine_differs"} <= set(d)
    assert main(["diff", str(base), str(new)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[3].startswith("the runs differ besides the change: ")
    assert text[3].endswith("batch 1 -> 64 samples per step")
    if not _contention_moved(d):
        assert text[4].startswith("time per sample -") and text[4].endswith(": improvement, beyond the 2% threshold")
    assert any(line.startswith("  step time ") for line in text)  # step time stays, as a secondary line


@pytest.mark.filterwarnings("ignore::perf_callbacks.exceptions.PerfWarning")
def test_a_per_step_checkpoint_removed_is_an_improvement_in_wall_time_per_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = fit(tmp_path / "ckpt", batch=8, steps=100, model=SlowSave(), checkpoint_every_step=True)
    new = fit(tmp_path / "none", batch=8, steps=100)
    code, d, _ = diff(capsys, base, new, "--fail-on-regression", "0")
    assert code == 0
    assert d["unit"] == "wall time per sample" and d["ci_high"] < -d["threshold"], d
    assert d["call"] == "improvement" or _contention_moved(d), d
    assert d["base"]["aside_share"] > 0.5 > d["new"]["aside_share"]
    assert not d["machine_differs"] or all(x["what"] != "batch" for x in d["machine"])
    html = tmp_path / "diff.html"
    assert main(["diff", str(base), str(new), "--html", str(html)]) == 0
    page = html.read_text()
    assert "wall time per sample -" in page and f'class="summary {d["call"].replace(" ", "-")}"' in page
    assert 'aria-label="effect and its interval"' in page  # drawn against the threshold band
    out = capsys.readouterr().out
    assert "time set aside (checkpoints, validation, compilation)" in out


@pytest.mark.filterwarnings("ignore::perf_callbacks.exceptions.PerfWarning")
def test_windows_keeps_the_window_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 2, "wait": 0, "warmup": 0,
                                                                       "active": 3, "repeat": 1}, summary=False)
    trainer(tmp_path, [cb], max_steps=60).fit(TinyModel(), loader(n=480))
    run = tmp_path / "perf"
    assert main(["diff", str(run), str(run), "--windows"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "perf-callbacks diff"
    assert main(["diff", str(run), str(run), "--json"]) == 0  # the same run twice, whole runs: never a change
    d = json.loads(capsys.readouterr().out)
    assert d["effect"] == 0.0 and d["call"] in ("no change", "undecided")
    assert 50 <= d["base"]["compared_steps"] < d["base"]["steps"]


def _record(run: Path, ms: float, steps: int) -> None:
    from perf_callbacks.core.context import RunContext
    from perf_callbacks.core.engine.step_log import StepLog

    log = StepLog(run, RunContext(run, "run"))
    log._start = (log._start[0], None)  # fed rows: no CPU contention read from this (shared) machine's scheduler
    for step in range(steps):
        log.rows.append((step, ms / 1e3 * (1 + step % 2), 8, 0.0, 0.0, 0))
    log.flush()


def test_a_side_without_a_step_record_compares_the_windows_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from tests.analysis.conftest import fixture_trace

    with_record, without = tmp_path / "with", tmp_path / "without"
    for run in (with_record, without):
        run.mkdir()
        shutil.copy(fixture_trace("compute_bound"), run)
    _record(with_record, 10.0, 100)
    assert main(["diff", str(with_record), str(without)]) == 0
    out, err = capsys.readouterr()
    assert err == f"perf-callbacks diff: {without}: no step record (steps-rank*.f32); comparing the latest windows " \
                  "(--windows)\n"
    assert out.splitlines()[0] == "perf-callbacks diff"  # the window comparison
    assert main(["diff", str(without), str(without)]) == 0  # neither side has one: windows, silently
    assert capsys.readouterr().err == ""


def test_too_few_comparable_steps_fall_back_to_the_windows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.analysis.conftest import fixture_trace

    run = tmp_path / "run"
    run.mkdir()
    (run / "t.pt.trace.json.gz").write_bytes(fixture_trace("compute_bound").read_bytes())
    _record(run, 10.0, 12)  # 3 warm-up steps out: 9 comparable
    assert main(["diff", str(run), str(run)]) == 0
    out, err = capsys.readouterr()
    assert "holds 9 comparable steps" in err and err.endswith("comparing the latest windows (--windows)\n")
    assert out.splitlines()[0] == "perf-callbacks diff"


def test_the_threshold_is_a_percentage_and_decides_the_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, new = tmp_path / "base", tmp_path / "new"
    _record(base, 10.0, 200)
    _record(new, 9.5, 200)  # 5% less, exactly (no noise): the interval is a point
    assert main(["diff", str(base), str(new), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["call"] == "improvement" and d["threshold"] == 0.02 and d["effect"] == pytest.approx(-0.05)
    assert main(["diff", str(base), str(new), "--json", "--threshold", "10"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["call"] == "no change" and d["threshold"] == 0.1
    assert main(["diff", str(base), str(new), "--threshold", "0"]) == 2
    assert "--threshold must be between 0 and 100 percent, got 0" in capsys.readouterr().err
    assert main(["diff", str(new), str(base), "--fail-on-regression", "5"]) == 1  # +5.3%: a regression beyond 5%
    assert capsys.readouterr().err == "perf-callbacks diff: step time regressed by 5.3%, more than " \
                                      "--fail-on-regression 5%\n"
    assert main(["diff", str(new), str(base), "--fail-on-regression", "6"]) == 0

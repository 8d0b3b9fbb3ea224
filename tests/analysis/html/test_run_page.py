"""The run's page, ``report.html``: written by the engine after each window, from the sidecars alone."""

from __future__ import annotations

from pathlib import Path

import pytest

import perf_callbacks.analysis.rank.collect as collect
from perf_callbacks.analysis.html.run_page import run_results, write_run_page
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.engine.engine import PerfEngine
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from tests.core.engine_helpers import train_mlp


def _train(tmp_path: Path, steps: int = 12) -> Path:
    """A real MLP on CPU through the engine, two 2-step windows with summaries; returns the run's folder."""
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 1, "wait": 1, "warmup": 1, "active": 2, "repeat": 2},
                                "summary": True})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=50))
    train_mlp(engine, steps)
    engine.close()
    return tmp_path / "run"


def test_the_engine_writes_the_run_page_with_every_window(tmp_path: Path) -> None:
    run = _train(tmp_path)
    windows = sorted(p.name for p in run.glob("window-*"))
    assert len(windows) == 2
    page = (run / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and '<svg class="chart windows"' in page
    first, second = (w.split("-")[1:] for w in windows)
    assert page.index(f"steps {int(first[0])}-{int(first[1])}") < page.index(f"steps {int(second[0])}-{int(second[1])}")


def test_the_run_page_reads_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _train(tmp_path)
    (run / "report.html").unlink()

    def parse(*_: object, **__: object) -> None:
        raise AssertionError("a trace was parsed")

    monkeypatch.setattr(collect, "analyze_file", parse)
    assert len(run_results(run)) == 2
    assert write_run_page(run) == run / "report.html"


def test_a_page_that_cannot_be_written_is_turned_off_with_one_warning(tmp_path: Path) -> None:
    (tmp_path / "run" / "report.html").mkdir(parents=True)  # a folder where the page goes: every write fails
    with pytest.warns(InstrumentUnavailableWarning, match="the run's report.html disabled") as caught:
        run = _train(tmp_path)
    assert len([w for w in caught if "report.html" in str(w.message)]) == 1
    assert len(list(run.glob("window-*/summary.txt"))) == 2  # the summaries are still written

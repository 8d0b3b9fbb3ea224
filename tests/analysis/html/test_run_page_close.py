"""The run's page at the run's end: the reporting rank rebuilds it once more when the engine closes."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import perf_callbacks.analysis.html.run_page as run_page
from perf_callbacks.analysis.sidecar import write_sidecar
from perf_callbacks.analysis.trace.sidecar_store import sidecar_path
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.engine.engine import PerfEngine
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from tests.core.engine_helpers import train_mlp

BEHIND = "1 of 2 ranks had a summary"


def _engine(tmp_path: Path, skip_first: int = 1) -> PerfEngine:
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": skip_first, "wait": 1, "warmup": 1, "active": 2,
                                             "repeat": 2}, "summary": True})
    return PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=50))


def _train(engine: PerfEngine, steps: int = 12, between: Callable[[int], None] = lambda _: None) -> None:
    """A real MLP on CPU through ``engine`` (left open); ``between(step)`` runs after each step."""
    train_mlp(engine, steps, between=between)


def _settle(engine: PerfEngine) -> None:
    """Wait for this rank's window jobs (as close would), without closing."""
    for job in list(engine.windows.handoff.jobs):
        job.join(120)


def test_close_rebuilds_the_page_with_a_rank_that_finished_after_the_last_window(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    layout = engine.windows.layout
    last = layout.trace_path(layout.window_dir(7, 8), 1)

    def second_rank_trace(step: int) -> None:  # rank 1's last trace lands before rank 0's last window's page
        if step == 5:
            _settle(engine)
            trace = json.loads(gzip.decompress(layout.trace_path(layout.window_dir(3, 4), 0).read_bytes()))
            trace["distributedInfo"] = {**trace.get("distributedInfo", {}), "rank": 1}  # same job
            last.parent.mkdir()
            last.write_bytes(gzip.compress(json.dumps(trace).encode()))

    _train(engine, between=second_rank_trace)
    _settle(engine)
    assert sorted(p.name for p in layout.run_dir.glob("window-*")) == ["window-000003-000004", "window-000007-000008"]
    page = (layout.run_dir / "report.html").read_text()  # rank 0's last window's page: rank 1 had no sidecar yet
    assert BEHIND in page and "rank 1 · step" not in page
    meta = json.loads(sidecar_path(layout.trace_path(last.parent, 0)).read_text())["meta"]
    assert "error" not in write_sidecar(last, {**meta, "rank": 1})  # rank 1 finishes after rank 0's last window
    engine.close()
    page = (layout.run_dir / "report.html").read_text()
    assert BEHIND not in page and "ranks had a summary" not in page
    assert "rank 0 · step 7" in page and "rank 1 · step" in page  # both ranks of the last window are drawn
    assert page.startswith("<!DOCTYPE html>") and '<svg class="chart windows"' in page


def test_no_page_at_close_when_no_window_was_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(run_page, "write_run_page", calls.append)
    engine = _engine(tmp_path, skip_first=100)
    _train(engine, steps=5)
    engine.close()
    assert calls == [] and not (tmp_path / "run" / "report.html").exists()


def test_no_page_at_close_after_an_exception_ended_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine(tmp_path)
    _train(engine)
    _settle(engine)
    calls: list[Path] = []
    monkeypatch.setattr(run_page, "write_run_page", calls.append)
    engine.close(RuntimeError("training failed"))
    assert calls == []


def test_a_page_that_fails_at_close_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _engine(tmp_path)
    _train(engine)
    _settle(engine)  # the windows' pages are written; only the one at close fails

    def fail(run_dir: Path) -> None:
        raise OSError(28, "No space left on device", str(run_dir / "report.html"))

    monkeypatch.setattr(run_page, "write_run_page", fail)
    with pytest.warns(InstrumentUnavailableWarning, match="the run's report.html disabled"):
        engine.close()
    assert (tmp_path / "run" / "report.html").read_text().startswith("<!DOCTYPE html>")  # the last good page stays

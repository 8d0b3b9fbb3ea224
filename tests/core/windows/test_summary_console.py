"""The window summary on the console: every line starts with ``perf-callbacks``; without tqdm, a plain print.

And its publishing through the engine: the console line, the text and scalars logged, by the reporting rank only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import pytest

from perf_callbacks.core.windows.summary import console_text, say, window_line
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from tests.core.engine_helpers import run_steps, summary_engine

SUMMARY = "perf-callbacks summary: steps 3-4, rank 0\n  overhead: 41 ms\nverdict: input_bound\n\ntop ops:\n"


def test_body_lines_get_the_prefix_and_the_header_keeps_its_own() -> None:
    assert console_text(SUMMARY).splitlines() == [
        "perf-callbacks summary: steps 3-4, rank 0",
        "perf-callbacks:   overhead: 41 ms",
        "perf-callbacks: verdict: input_bound",
        "perf-callbacks:",
        "perf-callbacks: top ops:",
    ]


def test_without_a_bar_it_is_printed_once(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "tqdm.std", raising=False)
    say(SUMMARY)
    assert capsys.readouterr().out == console_text(SUMMARY) + "\n"


def test_a_bar_that_cannot_be_cleared_still_gets_the_summary_once(capsys: pytest.CaptureFixture[str]) -> None:
    tqdm_std = pytest.importorskip("tqdm.std")

    class Broken(tqdm_std.tqdm):  # type: ignore[misc]
        def clear(self, *args: object, **kwargs: object) -> None:
            raise OSError("terminal gone")

    with Broken(total=2, file=sys.stderr):
        say(SUMMARY)
    assert capsys.readouterr().out.count("perf-callbacks summary: steps 3-4") == 1


def test_one_line_per_window_unless_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from perf_callbacks.core.context import RunContext
    from perf_callbacks.core.windows.summary import publish_summary, window_line

    text = "perf-callbacks summary: steps 6-6, rank 0\nverdict: host_bound\nrecommendations:\n  1. use CUDA graphs\n"
    meta = {"window": [6, 6], "partial": True}
    console = {"verdict": "host_bound", "figure": "device waiting on the host 40%", "action": "torch.compile"}
    line = window_line(console, meta, Path("w"))
    assert line == "perf-callbacks: steps 6-6 (partial) host_bound: device waiting on the host 40%; torch.compile -> " \
                   "w/summary.txt"
    assert window_line(None, meta, Path("w")) == "perf-callbacks: steps 6-6 (partial): no verdict (the trace could " \
                                                 "not be analysed) -> w/summary.txt"
    ctx = RunContext(output_dir=Path("."), run_name="r")
    publish_summary(ctx, text, {}, 6, line=line)
    assert capsys.readouterr().out == line + "\n"
    publish_summary(ctx, text, {}, 6)  # verbose: the whole summary
    assert capsys.readouterr().out == console_text(text) + "\n"


@pytest.mark.parametrize("verbose", [False, True])
def test_the_reporting_rank_publishes_its_windows_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          verbose: bool) -> None:
    """One line on the console (the whole summary when verbose), the text and scalars logged at the step after."""
    engine, texts, scalars = summary_engine(tmp_path, verbose=verbose)
    run_steps(engine, 7)
    engine.close()
    (path,) = engine.exported
    summary = (path.parent / "summary.txt").read_text()
    assert engine.windows.handoff.summaries == [summary]
    assert texts == [("perf/window/summary", f"```\n{summary}```", 6)]
    ((step, figures),) = scalars
    assert step == 6 and figures and all(k.startswith("perf/window/") for k in figures)
    side = json.loads((path.parent / "rank0.summary.json").read_text())
    line = window_line(side["console"], {"window": [4, 5], "partial": False}, path.parent)
    assert line.startswith(f"perf-callbacks: steps 4-5 {side['verdict']}: ")
    assert capsys.readouterr().out == (console_text(summary) if verbose else line) + "\n"


def test_a_summary_logger_that_raises_turns_the_engines_metrics_writer_off(tmp_path: Path) -> None:
    engine, _, _ = summary_engine(tmp_path)
    engine.ctx.log_text = mock.Mock(side_effect=OSError("tracker gone"))
    with pytest.warns(InstrumentUnavailableWarning, match="tracker gone"):
        run_steps(engine, 7)
        engine.close()
    assert not engine.outputs.enabled("metrics")


def test_only_the_lowest_rank_traced_reports_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine, texts, scalars = summary_engine(tmp_path, rank=1)
    run_steps(engine, 7)
    engine.close()
    (path,) = engine.exported  # rank 1 records its window, analysed for its sidecar...
    assert not (path.parent / "summary.txt").exists()  # ...but rank 0 reports
    assert engine.windows.handoff.summaries == texts == scalars == [] and capsys.readouterr().out == ""

"""The window summary on the console: every line starts with ``perf-callbacks``; without tqdm, a plain print."""

from __future__ import annotations

import sys

import pytest

from perf_callbacks.core.windows.summary import console_text, say

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

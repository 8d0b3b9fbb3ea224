"""Reading a trace does not pay for Python's cyclic garbage collector: it is paused while the events stream in and the
rank is analysed, and given back as it was, also when the file is bad."""

from __future__ import annotations

import gc
from pathlib import Path

from perf_callbacks.analysis.rank import collect
from perf_callbacks.analysis.trace.events import RankTrace
from tests.analysis.conftest import fixture_trace, write_trace, x


def test_the_collector_is_paused_while_a_trace_is_read_and_analysed(tmp_path: Path, monkeypatch) -> None:
    seen: list[tuple[str, bool]] = []
    load, analyze = collect.load_rank, collect.analyze_rank

    def loading(path: Path) -> RankTrace:
        seen.append(("load", gc.isenabled()))
        return load(path)

    def analysing(trace: RankTrace, top_k: int = 10):  # noqa: ANN202 - as analyze_rank
        seen.append(("analyse", gc.isenabled()))
        return analyze(trace, top_k)

    monkeypatch.setattr(collect, "load_rank", loading)
    monkeypatch.setattr(collect, "analyze_rank", analysing)
    assert gc.isenabled()
    loaded = collect.analyze_file(fixture_trace("sync_bound"))
    assert loaded.result is not None and seen == [("load", False), ("analyse", False)]
    assert gc.isenabled()  # given back
    bad = tmp_path / "rank0.pt.trace.json"
    bad.write_text('{"traceEvents": [', encoding="utf-8")
    assert collect.analyze_file(bad).error and gc.isenabled()  # given back after a bad file too
    gc.disable()
    try:  # a caller that paused it keeps it paused
        empty = write_trace(tmp_path / "rank1.pt.trace.json", [x("cpu_op", "aten::mm", 0.0, 1.0)])
        collect.analyze_file(empty)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_reading_alone_pauses_the_collector_too() -> None:
    """``read_trace`` pauses it for any caller (a merge, a hang report), not only for ``analyze_file``."""
    from perf_callbacks.analysis.trace.loader import read_trace

    class Sink:
        seen: list[bool] = []

        def add(self, events: list) -> None:  # noqa: ARG002 - the events are not needed
            self.seen.append(gc.isenabled())

        def reset(self) -> None:
            self.seen.clear()

    sink = Sink()
    read_trace(fixture_trace("sync_bound"), sink)
    assert sink.seen and not any(sink.seen) and gc.isenabled()

"""Reading what a run folder should not hold, in bounded time and memory: FIFOs, deep JSON, a gzip bomb, huge numbers.

Only regular files are opened (a FIFO is refused at once, never waited on); a sidecar-sized JSON file is bounded in
size and depth; a trace is read up to ``$PERF_CALLBACKS_MAX_TRACE_MB`` of JSON once decompressed; an event whose
``ts`` or ``dur`` is out of range is set aside and counted, never summed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks._input_files import JSON_MAX_DEPTH, NotRegularFile, read_json
from perf_callbacks.analysis.trace.events import load_rank
from perf_callbacks.analysis.trace.loader import MAX_TRACE_ENV, TraceError, TraceTooLarge, read_trace
from tests.analysis.conftest import kernel, launch, write_trace, x
from tests.bad_inputs import gzip_bomb


class _Sink:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.slices = 0

    def add(self, events: list[dict[str, Any]]) -> None:
        self.events += events
        self.slices += 1

    def reset(self) -> None:
        self.events, self.slices = [], 0


def test_a_fifo_is_refused_at_once_never_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "hang.json"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile, match=r"hang\.json: not a regular file \(a FIFO\), not read"):
        read_json(fifo)  # blocks forever if it is opened for reading without O_NONBLOCK
    trace = tmp_path / "rank0.pt.trace.json"
    os.mkfifo(trace)
    with pytest.raises(TraceError, match=r"rank0\.pt\.trace\.json: not a regular file \(a FIFO\), not read$"):
        read_trace(trace, _Sink())


def test_json_nested_too_deeply_or_too_large_is_refused_without_a_recursion_error(tmp_path: Path) -> None:
    deep = tmp_path / "rank0.summary.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=f"nested deeper than {JSON_MAX_DEPTH} levels"):
        read_json(deep)
    deep.write_text("[" * (JSON_MAX_DEPTH + 1) + "]" * (JSON_MAX_DEPTH + 1))  # below orjson's own limit
    with pytest.raises(ValueError, match="nested deeper"):
        read_json(deep)
    deep.write_text("[" * JSON_MAX_DEPTH + "]" * JSON_MAX_DEPTH)
    assert read_json(deep) is not None
    deep.write_text('{"a": "' + "x" * 2000 + '"}')
    with pytest.raises(ValueError, match="larger than"):
        read_json(deep, max_bytes=1000)


def test_a_gzip_bomb_ends_at_the_limit_naming_the_file_and_the_limit(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = gzip_bomb(tmp_path / "rank0.pt.trace.json.gz", 64)
    monkeypatch.setenv(MAX_TRACE_ENV, "16")
    with pytest.raises(TraceTooLarge) as raised:
        read_trace(bomb, _Sink())
    assert str(raised.value) == (f"{bomb}: more than 16 MB of JSON once decompressed, not read (the limit: "
                                 f"--max-trace-mb or ${MAX_TRACE_ENV}; 0: no limit)")
    monkeypatch.setenv(MAX_TRACE_ENV, "0")  # no limit: the 64 MB of whitespace are read, and the event in them
    sink = _Sink()
    assert read_trace(bomb, sink) == {"schemaVersion": 1}
    assert [e["name"] for e in sink.events] == ["k"]


def test_events_far_apart_in_the_file_are_all_read(tmp_path: Path) -> None:
    """Blocks without a seam wait and are joined once: the events on both sides of 12 MB of spaces are all read."""
    events = [json.dumps(e)[1:-1] for e in (kernel(10, 5, 1), launch(1, 1), kernel(30, 5, 2))]
    seam = "\n  },\n  {\n    "  # Kineto's layout: one event per block
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text('{\n  "schemaVersion": 1,\n  "traceEvents": [\n  {\n    ' + events[0] + " " * (12 << 20)
                    + seam + seam.join(events[1:]) + "\n  }\n  ]\n}")
    sink = _Sink()
    read_trace(path, sink)
    assert [e["ts"] for e in sink.events] == [10, 1, 30]
    assert sink.slices == 2  # streamed: cut at the seam after the spaces, then the rest (not parsed whole)


@pytest.mark.parametrize(("field", "value"), [("dur", 1e300), ("ts", 1e300), ("ts", -1e300), ("dur", float("nan"))])
def test_an_event_out_of_range_is_set_aside_and_counted(tmp_path: Path, field: str, value: float) -> None:
    bad = kernel(20, 5, 2, name="huge")
    bad[field] = value
    events = [x("cpu_op", "ProfilerStep#1", 0, 100), launch(1, 1), kernel(10, 5, 1), bad]
    trace = load_rank(write_trace(tmp_path / "rank0.pt.trace.json", events))
    assert trace.bad_events == 1
    assert [row[3] for row in trace.gpu] == ["gemm"]
    assert max(row[1] for row in trace.gpu) == 15


@pytest.mark.slow
def test_reading_a_trace_takes_time_linear_in_its_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """4x the whitespace takes at most 7x the time (the best of 3 runs each): joining the blocks once per seam is
    linear, where appending each block to one growing buffer (and searching it all for a seam) was quadratic (about
    10x here)."""
    import time

    monkeypatch.setenv(MAX_TRACE_ENV, "0")
    small, large = gzip_bomb(tmp_path / "small.json.gz", 32), gzip_bomb(tmp_path / "large.json.gz", 128)

    def best(path: Path) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            read_trace(path, _Sink())
            times.append(time.perf_counter() - t0)
        return min(times)

    ratio = best(large) / best(small)
    assert ratio < 7, ratio

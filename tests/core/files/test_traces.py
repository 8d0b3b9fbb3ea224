"""Trace files: layout, atomic writes that never overwrite, the size cap; a full disk leaves no half-written file."""

from __future__ import annotations

import errno
import gzip
import json
import os
import random
import re
import zlib
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.files.traces import (
    TraceLayout,
    TraceTooLargeError,
    _why_nothing_was_written,
    compress_trace,
    export_raw,
    new_run_name,
    publish,
    write_text,
)
from perf_callbacks.exceptions import InstrumentUnavailableWarning


def _disk_full(self: gzip.GzipFile, data: Any) -> NoReturn:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every gzip write fails as on a full disk (the raw export before it still succeeds)."""
    monkeypatch.setattr(gzip.GzipFile, "write", _disk_full)


def test_compress_trace_on_a_full_disk_leaves_nothing_behind(tmp_path: Path, full_disk: None) -> None:
    raw = tmp_path / ".rank0.raw.partial"
    raw.write_text(json.dumps({"traceEvents": []}))
    dest = tmp_path / "rank0.pt.trace.json.gz"
    with pytest.raises(OSError, match="No space left") as info:
        compress_trace(raw, dest)
    assert info.value.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_path.iterdir()) == [raw.name]  # the caller owns (and deletes) the raw file


def test_export_failure_disables_profiler_and_training_goes_on(tmp_path: Path, full_disk: None) -> None:
    logged: list[int] = []
    config = PerfConfig.from_dict({"schedule": {"skip_first": 2, "wait": 0, "warmup": 1, "active": 1, "repeat": 0},
                                   "summary": False, "degradation_threshold": 1e6})
    engine = PerfEngine(config, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=5,
                                           log_metrics=lambda metrics, step: logged.append(step)))
    x = torch.randn(8, 8, requires_grad=True)
    with pytest.warns(InstrumentUnavailableWarning, match=r"profiler disabled: No space left on device \(ENOSPC\): "
                      r".*/window-000003-000003/rank0\.pt\.trace\.json\.gz; training continues") as seen:
        for step in range(20):  # windows at steps 3, 5, 7, ...: the first export fails, the profiler stays off
            engine.batch_start(step)
            (x @ x).sum().backward()
            engine.batch_end(stepped=True, samples=8)
        engine.close()
    assert len([w for w in seen if issubclass(w.category, InstrumentUnavailableWarning)]) == 1
    assert logged == [5, 10, 15, 20]  # metrics go on after the failure
    assert not torch.autograd.profiler._is_profiler_enabled
    leftovers = [p.relative_to(tmp_path) for p in tmp_path.rglob("*") if not p.name.startswith("steps-rank")]
    assert leftovers in ([], [Path("run")]), "no trace, no .partial, no raw export, no empty window folder"
    assert {p.name for p in tmp_path.rglob("steps-rank*")} <= {"steps-rank0.f32", "steps-rank0.json"}  # the record


def test_run_names_are_timestamped_and_unique() -> None:
    names = {new_run_name() for _ in range(5)}
    assert len(names) == 5
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", n) for n in names), names


def test_layout_paths(tmp_path: Path) -> None:
    layout = TraceLayout(tmp_path, "run-1")
    assert layout.run_dir == tmp_path / "run-1"
    window = layout.window_dir(12, 1234567)
    assert window == tmp_path / "run-1" / "window-000012-1234567"
    assert TraceLayout.trace_path(window, 3) == window / "rank3.pt.trace.json.gz"
    assert TraceLayout.raw_path(window, 3) == window / ".rank3.raw.partial"


def test_export_raw_writes_a_hidden_scratch_file_and_enforces_the_cap(tmp_path: Path) -> None:
    window = tmp_path / "run" / "window-000001-000002"  # parents are created
    raw = export_raw(lambda p: p.write_bytes(b"x" * 1_000_000), window, 1, max_trace_mb=1.0)
    assert raw == window / ".rank1.raw.partial" and raw.stat().st_size == 1_000_000  # exactly at the cap: kept
    again = export_raw(lambda p: p.write_bytes(b"y"), window, 2, max_trace_mb=1.0)  # the folder exists already
    assert again.read_bytes() == b"y"
    with pytest.raises(TraceTooLargeError, match=r"^1\.5 MB$") as info:
        export_raw(lambda p: p.write_bytes(b"x" * 1_500_001), window, 3, max_trace_mb=1.0)
    assert info.value.size_mb == pytest.approx(1.500001)
    assert not TraceLayout.raw_path(window, 3).exists()


def test_export_raw_removes_its_file_when_the_export_fails(tmp_path: Path) -> None:
    def half_written(path: Path) -> None:
        path.write_bytes(b"{")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export_raw(half_written, tmp_path, 0, max_trace_mb=10.0)
    assert list(tmp_path.iterdir()) == []


def _like_kineto_on_a_full_disk(path: Path) -> None:
    """What Kineto does when its write fails: logs 'Failed to write to log file!', keeps '<path>.tmp', returns."""
    path.with_name(path.name + ".tmp").write_bytes(b"x" * 100)


def test_an_export_that_wrote_nothing_without_a_full_disk_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    window = tmp_path / "run" / "window-000003-000004"
    with pytest.raises(RuntimeError, match=r"^the profiler's export wrote no file: .*/\.rank0\.raw\.partial"):
        export_raw(_like_kineto_on_a_full_disk, window, 0, max_trace_mb=10.0, tidy=True)
    assert list(tmp_path.iterdir()) == []  # no .tmp, and the folders it made are gone


def test_a_failed_export_keeps_the_folders_unless_told_to_tidy(tmp_path: Path) -> None:
    """Other ranks may be writing into the window's folder: only the run's only writer (``tidy``) removes it."""
    window = tmp_path / "run" / "window-000003-000004"
    with pytest.raises(RuntimeError, match="the profiler's export wrote no file"):
        export_raw(_like_kineto_on_a_full_disk, window, 0, max_trace_mb=10.0)
    assert window.is_dir() and list(window.iterdir()) == []


def test_the_probe_of_an_empty_export_reports_the_real_error_of_the_write(tmp_path: Path) -> None:
    scratch = tmp_path / ".rank0.raw.partial.tmp"
    scratch.mkdir()  # the write fails: appending to a folder
    err = _why_nothing_was_written(tmp_path / ".rank0.raw.partial", scratch)
    assert isinstance(err, OSError) and err.errno == errno.EISDIR and err.strerror == os.strerror(errno.EISDIR)
    assert err.filename == str(tmp_path / ".rank0.raw.partial")


def test_a_profiler_export_that_fills_the_disk_names_enospc_and_leaves_nothing(small_fs: Path) -> None:
    """The real Kineto on a 64 KiB disk: it leaves '.rank0.raw.partial.tmp' and raises nothing (was: FileNotFoundError
    on '.rank0.raw.partial', the whole disk left in the '.tmp')."""
    config = PerfConfig.from_dict({"schedule": {"skip_first": 1, "wait": 0, "warmup": 0, "active": 6, "repeat": 1},
                                   "summary": False, "degradation_threshold": 1e6})
    engine = PerfEngine(config, RunContext(output_dir=small_fs, run_name="run", log_every_n_steps=100))
    x = torch.randn(8, 8, requires_grad=True)
    with pytest.warns(InstrumentUnavailableWarning, match=r"^perf-callbacks: profiler disabled: No space left on device "
                      r"\(ENOSPC\): .*/run/window-000001-000006/\.rank0\.raw\.partial; training continues$") as seen:
        for step in range(10):
            engine.batch_start(step)
            for _ in range(20):
                (x @ x).sum().backward()
            engine.batch_end(stepped=True, samples=8)
        engine.close()
    assert len(seen) == 1 and engine.steps_run == 10
    assert list(small_fs.rglob("*")) == [], "no .tmp, no .partial, no raw file, no empty folder"


def test_compress_trace_writes_through_a_hidden_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = tmp_path / ".rank0.raw.partial"
    raw.write_bytes(b'{"traceEvents": []}' * 1000)
    dest = tmp_path / "rank0.pt.trace.json.gz"
    seen: list[str] = []
    write = gzip.GzipFile.write

    def spy(self: gzip.GzipFile, data: Any) -> int:
        seen.extend(p.name for p in tmp_path.iterdir() if p != raw)
        return write(self, data)

    monkeypatch.setattr(gzip.GzipFile, "write", spy)
    assert compress_trace(raw, dest) == dest
    assert set(seen) == {f".rank0.pt.trace.json.gz.{os.getpid()}.partial"}
    assert gzip.decompress(dest.read_bytes()) == raw.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [raw.name, dest.name]


def test_compress_trace_level_and_no_overwrite(tmp_path: Path) -> None:
    rng = random.Random(0)  # trace-like text on which gzip levels 3, 4 and 5 all differ
    events = [{"name": f"aten::mm{rng.randrange(50)}", "ts": rng.randrange(10**6), "dur": rng.randrange(1000)}
              for _ in range(3000)]
    raw = tmp_path / "raw"
    raw.write_text(json.dumps(events))
    dest = tmp_path / "rank0.pt.trace.json.gz"
    assert compress_trace(raw, dest) == dest
    body = dest.read_bytes()
    header_end = body.index(b"\0", 10) + 1  # magic..os (10 bytes), then the NUL-terminated file name
    deflate = zlib.compressobj(4, zlib.DEFLATED, -15)
    assert body[header_end:-8] == deflate.compress(raw.read_bytes()) + deflate.flush()  # level 4 by default
    second = compress_trace(raw, dest, level=9)
    assert second == tmp_path / "rank0-1.pt.trace.json.gz"
    assert second.read_bytes()[8] == 2  # gzip XFL: "maximum compression"
    assert compress_trace(raw, dest, level=1).read_bytes()[8] == 4  # "fastest"
    assert dest.read_bytes() == body


def test_write_text_never_overwrites(tmp_path: Path) -> None:
    dest = tmp_path / "summary.txt"
    assert write_text(dest, "first") == dest
    assert write_text(dest, "second") == tmp_path / "summary-1.txt"
    assert write_text(dest, "third") == tmp_path / "summary-2.txt"
    assert [dest.read_text(), (tmp_path / "summary-2.txt").read_text()] == ["first", "third"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary-1.txt", "summary-2.txt", "summary.txt"]


def test_write_text_leaves_nothing_behind_on_failure(tmp_path: Path) -> None:
    with pytest.raises(UnicodeEncodeError):
        write_text(tmp_path / "x.txt", "\ud800")  # a lone surrogate cannot be encoded
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("name", "second"), [("rank0.pt.trace.json.gz", "rank0-1.pt.trace.json.gz"),
                                              ("result.json", "result-1.json"), ("notes", "notes-1")])
def test_publish_numbers_names_after_their_suffix(tmp_path: Path, name: str, second: str) -> None:
    for text in ("a", "b"):
        partial = tmp_path / ".partial"
        partial.write_text(text)
        published = publish(partial, tmp_path / name)
        partial.unlink()
    assert published == tmp_path / second and published.read_text() == "b"


@pytest.fixture
def no_hard_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system without hard links (some network and FUSE mounts): ``os.link`` fails with EPERM."""
    def no_links(src: Path, dst: Path) -> NoReturn:
        raise PermissionError(errno.EPERM, "hard links not supported")

    monkeypatch.setattr(os, "link", no_links)


def test_publish_without_hard_links_renames(tmp_path: Path, no_hard_links: None) -> None:
    (tmp_path / "summary.txt").write_text("old")
    for expected in ("summary-1.txt", "summary-2.txt"):
        partial = tmp_path / ".summary.partial"
        partial.write_text(expected)
        assert publish(partial, tmp_path / "summary.txt") == tmp_path / expected
        assert (tmp_path / expected).read_text() == expected and not partial.exists()
    assert (tmp_path / "summary.txt").read_text() == "old"


def test_writers_work_without_hard_links(tmp_path: Path, no_hard_links: None) -> None:
    raw = tmp_path / "raw"
    raw.write_bytes(b"{}")
    assert compress_trace(raw, tmp_path / "rank0.pt.trace.json.gz") == tmp_path / "rank0.pt.trace.json.gz"
    assert write_text(tmp_path / "summary.txt", "text") == tmp_path / "summary.txt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.pt.trace.json.gz", "raw", "summary.txt"]


def test_export_raw_failing_before_any_file_keeps_its_error(tmp_path: Path) -> None:
    def refuses(path: Path) -> None:
        raise RuntimeError("profiler refused to export")

    with pytest.raises(RuntimeError, match="refused"):
        export_raw(refuses, tmp_path, 0, max_trace_mb=10.0)

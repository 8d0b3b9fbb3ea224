"""One guard for every writer: the first failure turns that writer off with one warning naming the cause, what it
half-wrote is removed, and nothing reaches training; the background job never dies with a traceback."""

from __future__ import annotations

import errno
import gzip
import json
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks._errors import describe_error
from perf_callbacks.core.files.outputs import Outputs, make_dirs, remove_empty
from perf_callbacks.core.warn import WarnOnce
from perf_callbacks.core.windows import background
from perf_callbacks.core.windows.background import WindowJob
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from tests.small_fs import fill

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


def test_an_error_is_described_by_its_errno_name_and_path() -> None:
    assert describe_error(OSError(errno.ENOSPC, "No space left on device", "/out/a")) == \
        "No space left on device (ENOSPC): /out/a"
    assert describe_error(ENOSPC, Path("/out/b")) == "No space left on device (ENOSPC): /out/b"  # gzip names no file
    assert describe_error(FileNotFoundError(errno.ENOENT, "No such file or directory", b"/out/c")) == \
        "No such file or directory (ENOENT): /out/c"
    assert describe_error(ENOSPC) == "No space left on device (ENOSPC)"
    assert describe_error(RuntimeError("profiler busy")) == "RuntimeError: profiler busy"


def test_the_first_failure_turns_the_writer_off_with_one_warning_and_removes_leftovers(tmp_path: Path) -> None:
    half = tmp_path / ".summary.txt.1.partial"
    half.write_text("half")
    outputs = Outputs(WarnOnce(is_main=False), rank=1, world_size=2)  # warns on every rank, naming it
    with pytest.warns(InstrumentUnavailableWarning) as seen:
        outputs.failed("summaries", ENOSPC, tmp_path / "summary.txt", cleanup=[half])
        outputs.failed("summaries", OSError(errno.EIO, "Input/output error"), tmp_path / "summary.txt")
        assert outputs.call("summaries", lambda: 1 / 0) is None  # off: not even called
    assert [str(w.message) for w in seen] == [
        f"perf-callbacks: summary.txt files disabled on rank 1: No space left on device (ENOSPC): "
        f"{tmp_path / 'summary.txt'}; window summaries are still printed; training continues"]
    assert not half.exists()
    assert outputs.call("events", lambda: 7) == 7  # the other writers go on


def test_call_turns_a_raising_writer_off_and_returns_none(tmp_path: Path) -> None:
    outputs, calls = Outputs(), []

    def log() -> None:
        calls.append(1)
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(tmp_path / "x"))

    with pytest.warns(InstrumentUnavailableWarning, match=r"^perf-callbacks: metrics disabled: Not a directory "
                                                          r"\(ENOTDIR\): .*x; training continues$"):
        assert outputs.call("metrics", log) is None
    assert outputs.call("metrics", log) is None
    assert calls == [1] and not outputs.enabled("metrics")


def test_make_dirs_reports_what_it_created_and_remove_empty_only_removes_empty_folders(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    created = make_dirs(tmp_path / "run" / "a" / "b")
    assert created == [tmp_path / "run" / "a" / "b", tmp_path / "run" / "a"]
    (tmp_path / "run" / "a" / "kept.txt").write_text("")
    remove_empty(created)
    assert not (tmp_path / "run" / "a" / "b").exists() and (tmp_path / "run" / "a" / "kept.txt").exists()


TRACE = {"traceEvents": [  # one step, one op: enough for a verdict
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 0, "dur": 1000, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 500, "pid": 1, "tid": 1}]}


def _job(tmp_path: Path, header: list[str] | None = None) -> WindowJob:
    wdir = tmp_path / "run" / "window-000003-000004"
    wdir.mkdir(parents=True)
    raw = wdir / ".rank0.raw.partial"
    raw.write_text(json.dumps(TRACE))
    return WindowJob(raw, wdir / "rank0.pt.trace.json.gz", {"window": [3, 4]}, analyse=header is not None,
                     header=header, top_k=3)


def test_a_summary_that_cannot_be_written_is_reported_and_still_printed(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job(tmp_path, header=["perf-callbacks summary: steps 3-4, rank 0"])

    def full(dest: Path, text: str) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(background, "write_text", full)
    job.run()
    assert job.error is None and job.trace is not None and job.summary is not None
    ((writer, cause, path),) = job.failures
    assert (writer, path) == ("summaries", job.trace.parent / "summary.txt")
    assert describe_error(cause, path).startswith("No space left on device (ENOSPC): ")  # type: ignore[arg-type]


def test_a_sidecar_that_cannot_be_written_names_the_cause_from_the_analysis_process(tmp_path: Path,
                                                                                   small_fs: Path) -> None:
    wdir = small_fs / "window-000003-000004"
    wdir.mkdir()
    trace = wdir / "rank0.pt.trace.json.gz"
    job = _job(tmp_path, header=["perf-callbacks summary: steps 3-4, rank 0"])
    trace.write_bytes(gzip.compress(job.raw.read_bytes()))  # a trace on the small disk, then no room for its sidecar
    fill(small_fs)
    sidecar = job._analyse(trace)
    assert sidecar is not None and sidecar["error"] == \
        f"No space left on device (ENOSPC): {wdir / 'rank0.summary.json'}"
    assert job.failures == [("sidecars", sidecar["error"], None)]
    assert sorted(p.name for p in wdir.iterdir()) == ["rank0.pt.trace.json.gz"]  # no temporary sidecar left


def test_the_worker_thread_never_dies_with_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    died: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    job = _job(tmp_path, header=["perf-callbacks summary: steps 3-4, rank 0"])

    def broken(trace: Path) -> dict[str, Any]:
        raise KeyError("unexpected")

    monkeypatch.setattr(job, "_analyse", broken)
    job.start()
    job.join(60)
    assert not job.is_alive() and died == []
    assert [w for w, _, _ in job.failures] == ["sidecars"]
    second = _job(tmp_path / "again")
    second.start()  # the same worker thread still serves jobs
    second.join(60)
    assert second.trace is not None and second.trace.exists()


def test_outputs_warn_through_the_engine_warn_once_exactly_once_per_writer() -> None:
    outputs = Outputs()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for writer in ("traces", "events", "traces", "events"):
            outputs.failed(writer, ENOSPC, "/out")
    assert [str(w.message).split(":")[1].strip() for w in seen] == ["profiler disabled", "TensorBoard events disabled"]

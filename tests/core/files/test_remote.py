"""core/files/remote.py without a network: URL resolution, and the upload thread against fsspec's memory file system and a
file system that fails on purpose (transient errors retried, permanent ones not, one warning, files kept)."""

from __future__ import annotations

import errno
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import fsspec
import pytest

from perf_callbacks.core.files import remote
from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.core.files.remote import Uploads, is_remote, join_output, resolve_output
from perf_callbacks.exceptions import InstrumentUnavailableWarning


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "RETRY_DELAYS_S", (0.01, 0.02, 0.04))


def test_which_output_dirs_are_remote(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert [is_remote(p) for p in ("s3://b/p", "gs://b", "memory://x", "file:///tmp/x", "/tmp/x", Path("rel"))] == [
        True, True, True, False, False, False]
    assert resolve_output("file:///tmp/perf", 3) == (Path("/tmp/perf"), None)
    monkeypatch.setenv("PERF_CALLBACKS_STAGING", str(tmp_path))
    staging, url = resolve_output("s3://bucket/perf/", 3)
    assert url == "s3://bucket/perf" and staging.parent == tmp_path / "perf-callbacks-staging"
    assert staging.name.endswith(f"-rank3-pid{os.getpid()}")
    assert resolve_output("s3://bucket/perf", 4)[0] != staging  # each rank stages apart
    assert join_output("gs://b/logs/version_0/", "perf") == "gs://b/logs/version_0/perf"
    assert join_output("file:///tmp/logs", "perf") == Path("/tmp/logs/perf")


def _staged(root: Path) -> list[Path]:
    files = [root / "run/window-000001-000002/rank0.pt.trace.json.gz", root / "run/window-000001-000002/summary.txt",
             root / "run/tensorboard/events.out.tfevents.1"]
    for i, f in enumerate(files):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(bytes(100 * (i + 1)))
    (root / "run/window-000001-000002/.rank0.raw.partial").write_bytes(b"scratch")  # never uploaded
    return files


def test_uploads_keep_the_layout_and_remove_only_what_arrived(tmp_path: Path) -> None:
    files = _staged(tmp_path / "stage")
    up = Uploads("memory://up-layout/perf", tmp_path / "stage", None, Outputs())
    up.submit(tmp_path / "stage/run/window-000001-000002")
    left = up.finish(timeout_s=30)
    fs = fsspec.filesystem("memory")
    assert sorted(fs.find("/up-layout/perf")) == sorted(f"/up-layout/perf/{f.relative_to(tmp_path / 'stage')}"
                                                        for f in files)
    assert fs.size("/up-layout/perf/run/tensorboard/events.out.tfevents.1") == 300
    assert left == [] and up.uploaded == 3 and up.error is None
    assert [p.name for p in (tmp_path / "stage").rglob("*")] == ["run", "window-000001-000002",
                                                                 ".rank0.raw.partial"]


class Flaky:
    """A file system whose first ``failures`` puts raise ``error``; it then stores files in memory."""

    def __init__(self, failures: int, error: BaseException) -> None:
        self.failures, self.error, self.puts = failures, error, 0
        self.store: dict[str, int] = {}

    def put_file(self, local: str, dest: str) -> None:
        self.puts += 1
        if self.puts <= self.failures:
            raise self.error
        self.store[dest] = Path(local).stat().st_size

    def size(self, dest: str) -> int:
        return self.store[dest]


def _run(tmp_path: Path, fs: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Uploads, list[str], list[Path]]:
    monkeypatch.setattr(Uploads, "_connect", lambda self: fs)
    _staged(tmp_path / "stage")
    up = Uploads("s3://bucket/perf", tmp_path / "stage", None, Outputs())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        up.submit(tmp_path / "stage/run/window-000001-000002")
        left = up.finish(timeout_s=30)
    return up, [str(w.message) for w in seen if issubclass(w.category, InstrumentUnavailableWarning)], left


def test_a_transient_error_is_retried_with_backoff(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fs = Flaky(2, ConnectionError("connection reset by peer"))
    up, said, left = _run(tmp_path, fs, monkeypatch)
    assert said == [] and left == [] and up.uploaded == 3 and fs.puts == 5


@pytest.mark.parametrize("error", [PermissionError(errno.EACCES, "InvalidAccessKeyId"),
                                   FileNotFoundError(errno.ENOENT, "The specified bucket does not exist")])
def test_a_permanent_error_stops_uploads_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 error: OSError, capsys: pytest.CaptureFixture[str]) -> None:
    fs = Flaky(100, error)
    up, said, left = _run(tmp_path, fs, monkeypatch)
    assert fs.puts == 1  # not retried
    assert len(said) == 1 and said[0].startswith("perf-callbacks: uploads disabled: cannot upload to s3://bucket/perf: ")
    assert error.strerror in said[0] and f"the files stay in {tmp_path / 'stage'}; training continues" in said[0]
    assert len(left) == 3 and all(f.exists() for f in left)
    assert f"3 file(s) not uploaded to s3://bucket/perf ({up.error}); they are kept in {tmp_path / 'stage'}" in \
        capsys.readouterr().err


def test_transient_errors_that_last_stop_uploads_after_the_retries(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    fs = Flaky(100, TimeoutError("read timeout"))
    up, said, left = _run(tmp_path, fs, monkeypatch)
    assert fs.puts == 1 + len(remote.RETRY_DELAYS_S)  # then no other file is tried
    assert len(said) == 1 and "TimeoutError: read timeout" in said[0] and len(left) == 3


def test_a_size_that_differs_after_upload_keeps_the_local_copy(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fs = Flaky(0, OSError())
    fs.size = lambda dest: 1  # type: ignore[method-assign]
    up, said, left = _run(tmp_path, fs, monkeypatch)
    assert len(said) == 1 and "bytes after the upload" in said[0] and len(left) == 3


def test_finish_waits_no_longer_than_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import threading

    gate = threading.Event()

    class Stuck(Flaky):
        def put_file(self, local: str, dest: str) -> None:
            gate.wait(30)
            super().put_file(local, dest)

    monkeypatch.setattr(Uploads, "_connect", lambda self: Stuck(0, OSError()))
    _staged(tmp_path / "stage")
    up = Uploads("s3://bucket/perf", tmp_path / "stage", None, Outputs())
    left = up.finish(timeout_s=0.2)
    gate.set()
    assert len(left) == 3
    assert "not uploaded to s3://bucket/perf (still uploading after 0 s)" in capsys.readouterr().err


def test_ctrl_c_during_the_wait_at_close_says_what_is_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(Uploads, "_connect", lambda self: Flaky(100, TimeoutError("slow")))  # retried meanwhile
    _staged(tmp_path / "stage")
    up = Uploads("s3://bucket/perf", tmp_path / "stage", None, Outputs())

    def interrupted(timeout: float | None = None) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(up._done, "wait", interrupted)
    left = up.finish(timeout_s=30)  # returns instead of raising out of the engine's close
    assert len(left) == 3 and "3 file(s) not uploaded to s3://bucket/perf" in capsys.readouterr().err


def test_each_retry_waits_its_delay_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two transient failures of the first file: it is tried again after 0.01 s, then 0.02 s; the others at once.

    Only the sleeps of the thread that uploads to this test's file system count (another test's uploads may still be
    retrying in theirs)."""
    slept: list[tuple[object, float]] = []
    uploading = threading.local()  # the file system each thread last uploaded to: its sleeps are that upload's

    class Clock:
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        def sleep(self, seconds: float) -> None:
            slept.append((getattr(uploading, "fs", None), seconds))
            time.sleep(seconds)

    class Recorded(Flaky):
        first: str | None = None  # the first file put: only its first two puts fail, whatever thread puts the others

        def put_file(self, local: str, dest: str) -> None:
            uploading.fs = self
            self.first = self.first or dest
            if dest == self.first and self.failures:
                self.failures -= 1
                raise self.error
            self.store[dest] = Path(local).stat().st_size

    monkeypatch.setattr(remote, "time", Clock())
    fs = Recorded(2, ConnectionError("connection reset by peer"))
    up, said, left = _run(tmp_path, fs, monkeypatch)
    assert said == [] and left == [] and up.uploaded == 3
    ours = [s for owner, s in slept if owner is fs and s > 0]
    # each retry slept first, by the schedule (a mutant without the sleep leaves none); which delay each retry gets
    # depends on how the pool's threads took the files, so only the schedule's values are checked
    assert len(ours) >= 2 and ours[0] == 0.01 and set(ours) <= {0.01, 0.02, 0.04}, ours


def test_the_exit_hook_runs_only_in_the_process_that_registered_it(tmp_path: Path) -> None:
    """multiprocessing runs threading's exit hooks as a forked child (a DataLoader worker) ends: the parent's close
    must not run there."""
    import multiprocessing
    import os

    from perf_callbacks.core.files.remote import before_shutdown

    ran = tmp_path / "ran"
    cancel = before_shutdown(lambda: ran.write_text(str(os.getpid())))
    try:
        child = multiprocessing.get_context("fork").Process(target=int)
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert not ran.exists()  # the child ended without running the parent's hook
    finally:
        cancel()

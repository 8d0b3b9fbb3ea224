"""The request sources at their edges (issue 54): nothing they read can hold the training thread or fill its memory.

A FIFO, a symlink to ``/dev/zero``, a file far over the cap and a silent endpoint are real; what could block or eat
memory runs in a child process under a memory limit, or in a thread the test waits for with a bound of its own.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from perf_callbacks.config import ScheduleConfig
from perf_callbacks.core.triggers.captures import MAX_REQUEST_STEPS, CaptureSchedule
from perf_callbacks.core.triggers.live import LiveMarker, live_local
from perf_callbacks.core.triggers.request_files import MAX_REQUEST_BYTES, read_small
from perf_callbacks.core.triggers.requests import (
    CLOSE_WAIT_S,
    REQUEST_FILE,
    FileRequests,
    local_reader,
    remote_reader,
    write_request,
)
from perf_callbacks.core.triggers.schedule import Action, Schedule
from tests.silent_server import SilentServer, silent_fixture  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import resource, sys
from pathlib import Path
from perf_callbacks.core.triggers.requests import local_reader
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
found = local_reader(Path(sys.argv[1]))()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(repr(found), (after - before) * 1024)
"""


def read_in_child(path: Path) -> tuple[str, int]:
    """The reader's answer for ``path`` in a child process limited to 2 GB, and how much its peak memory grew."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found, grew = done.stdout.split()
    return found, int(grew)


def test_a_symlink_to_dev_zero_is_never_read(tmp_path: Path) -> None:
    (tmp_path / REQUEST_FILE).symlink_to("/dev/zero")
    found, grew = read_in_child(tmp_path / REQUEST_FILE)
    assert found == "None" and grew < 32 << 20  # the old reader filled the 2 GB limit (MemoryError)


def test_a_file_over_the_cap_is_never_read(tmp_path: Path) -> None:
    path = tmp_path / REQUEST_FILE
    with path.open("wb") as f:  # 256 MB of zeros, sparse: nothing on disk
        f.truncate(256 << 20)
    found, grew = read_in_child(path)
    assert found == "None" and grew < 32 << 20  # the old reader held all 256 MB
    path.write_bytes(json.dumps({"id": "x" * MAX_REQUEST_BYTES}).encode())  # just over the cap, and valid JSON
    assert read_small(path) is None


def test_a_fifo_or_a_folder_named_capture_is_ignored_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / REQUEST_FILE)
    answers: list[object] = []
    reader = threading.Thread(target=lambda: answers.append(local_reader(tmp_path / REQUEST_FILE)()), daemon=True)
    reader.start()
    reader.join(5.0)  # the old reader opened it and waited for a writer forever
    assert answers == [None]
    os.unlink(tmp_path / REQUEST_FILE)
    os.mkdir(tmp_path / REQUEST_FILE)
    assert local_reader(tmp_path / REQUEST_FILE)() is None


def test_a_fifo_swapped_in_after_the_check_cannot_block(tmp_path: Path) -> None:
    """``read_small`` opens with O_NONBLOCK|O_NOFOLLOW and checks the opened file: a FIFO there is not read."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # as read_small opens it: returns at once
    os.close(fd)
    assert read_small(fifo) is None
    (tmp_path / "target").write_text('{"id": "a"}')
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert read_small(tmp_path / "link") is None and read_small(tmp_path / "target") == b'{"id": "a"}'


def test_the_first_look_is_off_the_training_thread_and_close_is_prompt(silent: SilentServer, tmp_path: Path) -> None:
    """A remote folder whose endpoint never answers: start() returns at once and close() within CLOSE_WAIT_S; the
    thread's first look still notes the request already in the local folder as old."""
    old = write_request(tmp_path)
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
    files = FileRequests([local_reader(tmp_path / REQUEST_FILE), remote_reader("s3://bucket/perf", silent.options)],
                         s, every_s=0.05)
    t0 = time.monotonic()
    files.start()
    started = time.monotonic() - t0
    deadline = time.monotonic() + 10
    while silent.accepted == 0 and time.monotonic() < deadline:  # the thread is now waiting on the endpoint
        time.sleep(0.01)
    assert silent.accepted >= 1 and old in files.served and not s.pending
    t1 = time.monotonic()
    files.close()
    closed = time.monotonic() - t1
    assert started < 0.5 and closed <= CLOSE_WAIT_S + 0.5, (started, closed)


def test_the_thread_keeps_a_live_marker_after_its_first_look_and_removes_it(tmp_path: Path) -> None:
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
    marker = LiveMarker("20260101-000000-abcdef", rank=3, poll_s=0.02, folder=tmp_path)
    files = FileRequests([local_reader(tmp_path / REQUEST_FILE)], s, every_s=0.02, marker=marker)
    files.start()
    try:
        deadline = time.monotonic() + 10
        while not live_local(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.01)
        (found,) = live_local(tmp_path)
        assert (found.run, found.rank, found.pid) == ("20260101-000000-abcdef", 3, os.getpid())
        assert live_local(tmp_path / found.run) == [found]  # the run's folder: its marker is in the output_dir
    finally:
        files.close()
    assert live_local(tmp_path) == [] and not list(tmp_path.glob(".perf-callbacks-live-*"))


def test_requests_dropped_without_close_take_their_marker_with_them(tmp_path: Path) -> None:
    import gc

    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
    files = FileRequests([local_reader(tmp_path / REQUEST_FILE)], s, every_s=0.02,
                         marker=LiveMarker("r", rank=0, poll_s=0.02, folder=tmp_path))
    files.start()
    deadline = time.monotonic() + 10
    while not live_local(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert live_local(tmp_path)
    thread = files._thread
    del files
    gc.collect()
    assert thread is not None
    thread.join(5.0)
    assert not thread.is_alive() and live_local(tmp_path) == []


def test_a_stale_or_dead_marker_is_no_live_run(tmp_path: Path) -> None:
    marker = LiveMarker("r", rank=0, poll_s=2.0, folder=tmp_path)
    marker.beat()
    path = tmp_path / marker.name
    data = json.loads(path.read_text())
    assert live_local(tmp_path)
    path.write_text(json.dumps({**data, "t": data["t"] - 3 * data["refresh_s"] - 3}))  # not written for 3 refreshes
    assert live_local(tmp_path) == []
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    path.write_text(json.dumps({**data, "pid": int(dead.stdout)}))  # fresh, but its process is gone
    assert live_local(tmp_path) == []


class Counting(Schedule):
    """A schedule that counts how often it is asked."""

    calls = 0

    def action(self, step: int) -> Action:
        Counting.calls += 1
        return super().action(step)

    def next_active(self, step: int) -> float:
        Counting.calls += 1
        return super().next_active(step)


@pytest.mark.parametrize("steps", [2, MAX_REQUEST_STEPS, 10**12])
def test_laying_out_a_window_costs_the_same_whatever_its_length(steps: int, caplog: pytest.LogCaptureFixture) -> None:
    s = CaptureSchedule(Counting(ScheduleConfig(skip_first=10**15)))
    Counting.calls = 0
    with caplog.at_level(logging.INFO, logger="perf_callbacks.core.triggers.captures"):
        s.request("file", "big", steps)
        assert s.action(50) is Action.RECORD
    assert Counting.calls <= 3, Counting.calls  # the old loop asked once per step of the window
    assert s.plan is not None and (s.plan.first, s.plan.last) == (50, 50 + min(steps, MAX_REQUEST_STEPS) - 1)
    capped = [r.getMessage() for r in caplog.records if "capped" in r.getMessage()]
    assert capped == ([f"perf-callbacks: file request big asks for {steps} steps: capped at {MAX_REQUEST_STEPS} "
                       "(MAX_REQUEST_STEPS)"] if steps > MAX_REQUEST_STEPS else [])


def test_a_long_request_still_ends_before_the_next_scheduled_warm_up() -> None:
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=100, wait=1, warmup=1, active=3, repeat=1)))
    s.request("file", "long", 10**12)
    s.action(40)
    assert s.plan is not None and (s.plan.first, s.plan.last) == (40, 100)  # 101: the warm-up
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=100, wait=1, warmup=1, active=3, repeat=1)))
    s.request("file", "after", 10**12)
    s.action(105)  # the schedule has no more windows
    assert s.plan is not None and s.plan.last == 105 + MAX_REQUEST_STEPS - 1

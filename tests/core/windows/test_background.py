"""A window's background job ends when its analysis process does, whatever the user's processes inherit meanwhile.

The analysis runs in a child process; a ``DataLoader`` with persistent workers started (``fork``) while that child
runs, or while it is being started, must not hold the job: each test keeps the loader's workers alive past the job
and fails, after a quarter of the time the engine waits at close (``CLOSE_WAIT_S``), if the job waited for them.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks.analysis.trace.sidecar_store import CANNOT_WRITE, STDERR_PREFIX
from perf_callbacks.core.engine.closing import CLOSE_WAIT_S
from perf_callbacks.core.windows import background
from perf_callbacks.core.windows.background import WindowJob

JOB_WAIT_S = CLOSE_WAIT_S / 4
CAUSE = "No space left on device (ENOSPC): planted"
_FORKING: list[threading.Event] = []  # armed by a test: set when a fork of this process begins


def _on_fork() -> None:
    for event in _FORKING:
        event.set()


os.register_at_fork(before=_on_fork)  # after perf_callbacks' hooks: runs before them


def _job(tmp_path: Path) -> WindowJob:
    raw = tmp_path / ".rank0.raw"
    raw.write_text('{"traceEvents": []}')
    dest = tmp_path / "window-000001-000002" / "rank0.pt.trace.json.gz"
    dest.parent.mkdir()
    return WindowJob(raw, dest, {"window": [1, 2]}, analyse=True, header=None, top_k=5)


def _analysis(started: Path, go: Path | None) -> str:
    """An analysis process that says it started, waits for ``go`` (if given), then fails writing its sidecar."""
    wait = f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.01)\n" if go else ""
    return (f"import pathlib, sys, time\npathlib.Path({str(started)!r}).touch()\n{wait}"
            f"sys.stderr.write({STDERR_PREFIX + CAUSE!r} + '\\n')\nsys.exit({CANNOT_WRITE})\n")


def _until(done: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def persistent_workers() -> Iterator[Callable[[], Any]]:
    """Start a real DataLoader's persistent worker (``fork``) when called; the workers live until the test ends."""
    iterators: list[Any] = []

    def start() -> Any:
        loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=1, persistent_workers=True,
                            multiprocessing_context="fork")
        iterators.append(iter(loader))
        next(iterators[-1])  # the worker has started and answered
        return iterators[-1]

    yield start
    for it in iterators:
        it._shutdown_workers()


def _alive(it: Any) -> bool:
    return all(w.is_alive() for w in it._workers)


def test_a_persistent_worker_forked_while_the_analysis_runs_does_not_hold_the_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, persistent_workers: Callable[[], Any]) -> None:
    """No write end of a pipe to the child may stay open in this process while it runs (closed after the wait, say)."""
    started, go = tmp_path / "started", tmp_path / "go"
    monkeypatch.setattr(background, "_WORKER", _analysis(started, go))
    job = _job(tmp_path)
    job.start()
    _until(started.exists)
    workers = persistent_workers()  # forked while the analysis process runs
    go.touch()
    assert job.finished.wait(JOB_WAIT_S), "the job waited for the loader's worker, not for the analysis process"
    assert _alive(workers)
    assert job.failures == [("sidecars", CAUSE, None)]  # its stderr still reached the job


def test_a_fork_while_the_analysis_process_is_being_started_does_not_hold_the_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, persistent_workers: Callable[[], Any]) -> None:
    """``subprocess`` reads a pipe of its own to end-of-file while it starts a child: a fork then must wait."""
    forking, starting = threading.Event(), threading.Event()
    fork_exec = subprocess._fork_exec  # type: ignore[attr-defined]

    def slow_fork_exec(*args: Any) -> int:  # its pipe is open: let the test's fork begin, then go on
        starting.set()
        forking.wait(60)
        time.sleep(0.5)  # the fork, if not held off, is done by now
        return int(fork_exec(*args))

    monkeypatch.setattr(subprocess, "_fork_exec", slow_fork_exec)
    monkeypatch.setattr(background, "_WORKER", _analysis(tmp_path / "started", None))
    monkeypatch.setattr(sys.modules[__name__], "_FORKING", [forking])
    job = _job(tmp_path)
    job.start()
    assert starting.wait(60)
    workers = persistent_workers()
    assert job.finished.wait(JOB_WAIT_S), "the job waited for the loader's worker, not for the analysis process"
    assert _alive(workers)
    assert job.failures == [("sidecars", CAUSE, None)]


def _start_a_job_and_exit(tmp_path: Path) -> None:
    job = _job(tmp_path)
    job.analyse = False
    job.start()
    os._exit(0 if job.finished.wait(JOB_WAIT_S) and job.trace is not None else 1)


def test_a_process_forked_while_another_thread_starts_the_worker_can_run_jobs(tmp_path: Path) -> None:
    """A fork copies the worker's lock as it is: held, if another thread was starting the worker thread then."""
    held, done = threading.Event(), threading.Event()

    def starting_the_worker() -> None:  # as in `_runner`, which starts the worker thread under the lock
        with background._LOCK:
            held.set()
            done.wait(60)

    threading.Thread(target=starting_the_worker, daemon=True).start()
    assert held.wait(60)
    child = multiprocessing.get_context("fork").Process(target=_start_a_job_and_exit, args=(tmp_path,))
    child.start()
    child.join(JOB_WAIT_S)
    done.set()
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0

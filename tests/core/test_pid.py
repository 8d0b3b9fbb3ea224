"""``current_pid``: the process id without a system call, right in a forked child too."""

from __future__ import annotations

import os

from perf_callbacks.core.pid import current_pid


def test_it_asks_no_system_call(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    pid = os.getpid()

    def no_call() -> int:
        raise AssertionError("os.getpid called")

    monkeypatch.setattr(os, "getpid", no_call)
    assert current_pid() == pid


def test_a_forked_child_gets_its_own_id() -> None:
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:  # report, and leave without running the parent's exit handlers
        os.write(write_fd, f"{current_pid()} {os.getpid()}".encode())
        os._exit(0)
    os.close(write_fd)
    os.waitpid(child, 0)
    said, real = map(int, os.read(read_fd, 100).split())
    os.close(read_fd)
    assert said == real == child != current_pid()

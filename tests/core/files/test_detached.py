"""Child processes whose wait ends with their exit, and forks held off while one is started."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from perf_callbacks.core.files.detached import run_detached

WAIT_S = 30.0


def test_the_child_s_status_and_stderr_are_returned() -> None:
    code = "import sys; sys.stderr.write('no space'); sys.exit(3)"
    assert run_detached([sys.executable, "-c", code], timeout_s=WAIT_S) == (3, "no space")


def test_a_child_past_its_timeout_is_killed() -> None:
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_detached([sys.executable, "-c", "import time; time.sleep(600)"], timeout_s=0.5)
    assert time.monotonic() - t0 < WAIT_S


def _start_a_child_and_exit() -> None:
    os._exit(run_detached([sys.executable, "-c", "pass"], timeout_s=WAIT_S)[0])


def test_a_forked_process_can_start_children_of_its_own() -> None:
    """The fork was held off by a lock that the forking thread holds: the child must not inherit it held."""
    child = multiprocessing.get_context("fork").Process(target=_start_a_child_and_exit)
    child.start()
    child.join(WAIT_S)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0

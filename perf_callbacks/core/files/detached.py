"""Child processes that nothing a user's fork inherits can hold: the wait ends when the child exits.

A pipe's reader sees end-of-file only when every copy of its write end is closed. While ``subprocess`` starts a
child, the parent holds the write ends of the child's pipes (``stderr=PIPE``, and an exec-status pipe of its own that
it then reads to end-of-file), and a process forked at that moment (a ``DataLoader`` worker started with the ``fork``
method, persistent for the whole run) keeps copies until it exits: the parent's read then waits for that worker, not
for the child. So here the child's stderr goes to an unnamed temporary file, read once :meth:`subprocess.Popen.wait`
has seen the child exit (a forked process may keep a copy of the file; nobody waits on it), and forks wait, at most
``FORK_WAIT_S``, while :func:`run_detached` starts its child (``os.register_at_fork``: forks of Python code such as
``multiprocessing``'s; ``subprocess`` runs no hooks for its own).

Example:
    >>> import sys
    >>> run_detached([sys.executable, "-c", "import sys; sys.stderr.write('no'); sys.exit(3)"], timeout_s=60)
    (3, 'no')
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from typing import IO

FORK_WAIT_S = 5.0
"""How long a fork waits for a child to be started (milliseconds, normally) before it goes ahead anyway."""


def run_detached(cmd: list[str], timeout_s: float, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Run ``cmd`` in a session of its own, without stdin or stdout; wait for its exit, at most ``timeout_s``.

    Returns:
        The exit status and what the child wrote to stderr (``""`` when no temporary file could be made).

    Raises:
        OSError: the child could not be started.
        subprocess.TimeoutExpired: the child ran past ``timeout_s``; it was killed.
    """
    with _stderr_file() as err:
        with spawning():
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL if err is None else err, env=env,
                                    start_new_session=True)
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # its session's group: the child and what it started
            proc.wait()
            raise
        return code, _read(err)


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Hold off forks (of other threads) while the body starts a child process."""
    with _LOCK:
        yield


_LOCK = threading.Lock()
_FORKING = threading.local()  # held: whether this thread's fork in progress holds _LOCK


def _before_fork() -> None:
    _FORKING.held = _LOCK.acquire(timeout=FORK_WAIT_S)


def _after_fork_in_parent() -> None:
    if getattr(_FORKING, "held", False):
        _FORKING.held = False
        _LOCK.release()


def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()  # the copy is held by the forking thread, or by a thread the child does not have
    _FORKING.held = False


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def _stderr_file() -> Iterator[IO[bytes] | None]:
    try:
        f = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the with below
    except OSError:  # no writable temporary folder: the child's stderr is dropped
        yield None
        return
    with f:
        yield f


def _read(f: IO[bytes] | None) -> str:
    if f is None:
        return ""
    f.seek(0)
    return f.read().decode(errors="replace")

"""The process id without a system call: read once at import, and again in a forked child at fork.

``os.getpid()`` is a system call (about 5 us with cold caches right after a training step). The readers of per-process
files (``/proc/<pid>/...``) that run at logging steps ask :func:`current_pid` instead, to tell a forked child (a
DataLoader worker, a user's process) that must open its own files.

Example:
    >>> import os
    >>> current_pid() == os.getpid()
    True
"""

from __future__ import annotations

import os

__all__ = ["current_pid"]

_PID = [os.getpid()]


def current_pid() -> int:
    """The id of the calling process (set anew in a forked child)."""
    return _PID[0]


def _forked() -> None:
    _PID[0] = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)

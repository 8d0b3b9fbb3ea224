"""How long the training thread waited for a CPU: Linux's run-queue delay, read once per logging interval.

A step on a shared machine takes longer when other processes hold the cores: the thread is ready to run and waits. The
kernel counts that wait per thread (the second field of ``/proc/thread-self/schedstat``, nanoseconds spent runnable
but not running). Time blocked on the device, I/O, a collective or a sleep is not in it: that is the run's own time.
The slowdown detector uses it to tell a run that got slower from a machine that got busier.

Example:
    >>> wait = CpuWait()
    >>> first = wait.interval()  # None where the kernel does not say (not Linux, no schedstat)
    >>> second = wait.interval()
    >>> second is None or second >= 0.0
    True
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from types import EllipsisType

from perf_callbacks.core.pid import current_pid

SCHEDSTAT = "/proc/thread-self/schedstat"


def run_delay_s() -> float | None:
    """Seconds the calling thread has waited for a CPU since it started; None where the kernel does not say."""
    try:
        with open(SCHEDSTAT, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class ThreadWait:
    """:func:`run_delay_s` on a file kept open.

    A read is one ``pread`` (about 1 us, against about 8 us to open, read and close the file each time, and far more
    when the path is not cached between logging intervals).

    The file is opened on the calling thread and says that thread's wait: read from another thread, it is opened
    again for that one. Closed with this object.
    """

    def __init__(self) -> None:
        self._fd: int | None = None
        self._owner: tuple[int, int] | None = None  # (process, thread) the file was opened for
        self._closer: weakref.finalize | None = None  # type: ignore[type-arg]

    def __call__(self) -> float | None:
        """Seconds the calling thread has waited for a CPU since it started; None where the kernel does not say."""
        sched = self.sched()
        return None if sched is None else sched[1]

    def sched(self) -> tuple[float, float] | None:
        """``(ran, waited)``: seconds the calling thread ran on a CPU and waited for one; None where not said."""
        try:
            if self._owner != (current_pid(), threading.get_ident()) or self._fd is None:
                self._open()
            assert self._fd is not None
            ran, waited = os.pread(self._fd, 128, 0).split()[:2]
            return int(ran) / 1e9, int(waited) / 1e9
        except (OSError, ValueError, AssertionError):
            return None

    def _open(self) -> None:
        """Open the calling thread's file (a forked child opens its own: the inherited one is its parent's thread)."""
        if self._closer is not None:
            self._closer()
        self._fd, self._owner = None, (current_pid(), threading.get_ident())
        self._fd = os.open(SCHEDSTAT, os.O_RDONLY)
        self._closer = weakref.finalize(self, os.close, self._fd)


class CpuWait:
    """The calling thread's wait for a CPU over each interval: :meth:`interval` returns the wait since its last call.

    Args:
        read: the calling thread's cumulative wait in seconds, or None (default: a :class:`ThreadWait`, which reads
            what :func:`run_delay_s` reads).
    """

    def __init__(self, read: Callable[[], float | None] | None = None) -> None:
        self._fed = read is None  # a caller that already read the counter may pass it to interval()
        read = read or ThreadWait()
        self._read = read
        self._last: tuple[int, float | None] = (threading.get_ident(), read())

    def interval(self, reading: float | None | EllipsisType = ...) -> float | None:
        """Seconds waited for a CPU since the previous call (or construction).

        ``reading``: the calling thread's cumulative wait, read by the caller from the same kernel counter (the
        logging step's load mark reads it once for both); a ``read`` given at construction is used instead.
        None when a reading is missing or the previous one was taken on another thread (each thread counts its own).
        """
        now = (threading.get_ident(), reading if self._fed and not isinstance(reading, EllipsisType) else self._read())
        (thread, last), self._last = self._last, now
        if now[1] is None or last is None or thread != now[0]:
            return None
        return max(now[1] - last, 0.0)

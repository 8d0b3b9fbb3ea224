"""The training thread's wait for a CPU around a slow step (``capture_on_anomaly``): its own time, not the machine's.

A step is long on a busy machine because the thread was ready and waited for a core (Linux's run-queue delay, see
``core/timing/cpu_wait.py``), or long because of what it did. Only the second is an anomaly of the run. Reading the wait
at every step would cost the training loop a system call per step; instead a daemon thread reads the training thread's
counter (``/proc/self/task/<tid>/schedstat``, a file kept open: one ``pread``) every ``every_s`` seconds into a short
ring. For a step above the bar, the training thread reads the counter once more: the wait since the last sample
taken before the step began is at least the step's own wait, so ``elapsed`` less it is at most the step's own time.
Where the kernel does not say (not Linux), the step's own time is its elapsed time.

Example:
    >>> sampler = WaitSampler(every_s=0.01)
    >>> sampler.own(0.5) <= 0.5  # nothing sampled yet: the elapsed time itself
    True
    >>> sampler.close()
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from typing import Any

SAMPLES = 512  # about 25 s at the default rate: a step longer than that is judged on its elapsed time


class WaitSampler:
    """Samples the calling (training) thread's cumulative CPU wait from a daemon thread.

    Args:
        every_s: seconds between two samples.
    """

    def __init__(self, every_s: float = 0.05) -> None:
        self.every_s = every_s
        self.samples: collections.deque[tuple[float, float]] = collections.deque(maxlen=SAMPLES)
        self._fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[float, float | None] = (time.perf_counter(), None)
        try:
            self._fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        except OSError:
            return
        self._last = (time.perf_counter(), self.read())

    def read(self) -> float | None:
        """The training thread's cumulative wait for a CPU (seconds); None where the kernel does not say."""
        fd = self._fd
        if fd is None:
            return None
        try:
            return int(os.pread(fd, 128, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return None

    def start(self) -> None:
        """Start sampling (nothing where the counter cannot be read)."""
        if self._fd is not None and self._thread is None:
            self._thread = threading.Thread(target=_sample, args=(weakref.ref(self), self._stop, self.every_s),
                                            name="perf-callbacks-wait", daemon=True)
            self._thread.start()

    def sample(self) -> None:
        """One reading into ``samples``."""
        t, waited = time.perf_counter(), self.read()
        if waited is not None:
            self.samples.append((t, waited))

    def own(self, elapsed: float) -> float:
        """At most the own time of the step that just ended after ``elapsed`` seconds (its wait taken off)."""
        now, waited = time.perf_counter(), self.read()
        if waited is None:
            return elapsed
        began = now - elapsed
        before = [w for t, w in list(self.samples) if t <= began]
        return elapsed - max(waited - before[-1], 0.0) if before else elapsed

    def fraction(self) -> float:
        """The share of the time since the last call that the thread waited for a CPU (0 where not known)."""
        now, waited = time.perf_counter(), self.read()
        (t0, w0), self._last = self._last, (now, waited)
        if waited is None or w0 is None or now <= t0:
            return 0.0
        return min(max((waited - w0) / (now - t0), 0.0), 1.0)

    def close(self) -> None:
        """Stop sampling and close the file."""
        self._stop.set()
        thread, fd, self._fd = self._thread, self._fd, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)
        if fd is not None:
            os.close(fd)


def _sample(ref: weakref.ReferenceType[Any], stop: threading.Event, every_s: float) -> None:
    """The thread: it holds the sampler weakly and ends once it is gone."""
    while not stop.wait(every_s):
        owner = ref()
        if owner is None:
            return
        owner.sample()
        del owner

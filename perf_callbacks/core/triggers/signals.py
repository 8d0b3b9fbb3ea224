"""The capture signal (``capture_signal``, ``SIGUSR2`` by default): a window at the rank's next step, or on all ranks.

The handler is installed from the main thread only; it chains to the handler it replaced (a callable one) and puts
it back when the engine closes, if nothing replaced ours meanwhile. With ``capture_signal_all_ranks`` the handler
does no I/O (it runs on the training thread): it hands the signal's name to ``forward``, and the request thread
writes a request file that every rank serves at one agreed step (``core/triggers/agreement.py``).

Example:
    >>> from perf_callbacks.config import ScheduleConfig
    >>> from perf_callbacks.core.triggers.captures import CaptureSchedule
    >>> from perf_callbacks.core.triggers.schedule import Schedule
    >>> s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=100)))
    >>> SignalRequest("SIGUSR2", s).handle()
    >>> list(s.pending)
    [('signal', 'SIGUSR2', None, None)]
"""

from __future__ import annotations

import signal
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

from perf_callbacks.core.triggers.captures import CaptureSchedule


class SignalRequest:
    """``signame`` opens a window at the next step; the previous handler is still called, and restored by close.

    Args:
        signame: e.g. ``"SIGUSR2"``.
        schedule: where the request goes.
        forward: with ``capture_signal_all_ranks``, what takes the signal instead (it must not block: the request
            thread writes the request file); None: this rank's next step.
    """

    def __init__(self, signame: str, schedule: CaptureSchedule,
                 forward: Callable[[str], None] | None = None) -> None:
        self.signame, self.schedule, self.forward = signame, schedule, forward
        self.signum = signal.Signals[signame]
        self.previous: Any = None
        self.installed = False
        self._handle: Callable[[int, FrameType | None], None] | None = None

    def install(self) -> bool:
        """Install the handler (the main thread only: elsewhere Python forbids it); True when installed."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self.previous = signal.getsignal(self.signum)
        self._handle = _handler(weakref.ref(self), self.previous)
        signal.signal(self.signum, self._handle)
        self.installed = True
        return True

    def handle(self) -> None:
        """The signal came: a window at the next step (or a request for all ranks, through ``forward``)."""
        if self.forward is not None:
            self.forward(self.signame)
        else:
            self.schedule.request("signal", self.signame)

    def close(self) -> None:
        """Put the previous handler back, unless another one replaced ours since (then it stays)."""
        if not self.installed or threading.current_thread() is not threading.main_thread():
            return
        self.installed = False
        if signal.getsignal(self.signum) == self._handle:
            signal.signal(self.signum, self.previous if self.previous is not None else signal.SIG_DFL)


def _handler(ref: weakref.ReferenceType[SignalRequest], previous: Any) -> Callable[[int, FrameType | None], None]:
    """The installed handler: it holds the requests weakly (a process-wide handler keeps no engine alive)."""

    def handle(signum: int, frame: FrameType | None) -> None:
        owner = ref()
        if owner is not None:
            owner.handle()
        if callable(previous):
            previous(signum, frame)

    return handle

"""One global step for a request on every rank: agreed through the run's folder, with no collective and no wait.

A request file (``perf-callbacks capture RUN_DIR``, or ``SIGUSR2`` with ``capture_signal_all_ranks``) is seen by each
rank's request thread at its own time, up to ``capture_poll_s`` apart, so "the next step" differs between ranks. In a
run of more than one rank, the window opens instead at a step the ranks agree on through one small file in the
run's folder (the remote one with a remote ``output_dir``)::

    <run>/capture-<id>.json    {"id": "...", "at_step": 1234, "rank": 0, "t": 1765000000.0}

The protocol, run by each rank's request thread (never the training thread; nothing waits for another rank):

1. **Propose or adopt.** A rank that sees a new request reads ``capture-<id>.json``. If there is none, it proposes
   ``at_step`` = its next step + a margin and creates the file exclusively (a hard link of a complete temporary file
   locally, a conditional write remotely): the first proposal wins and the others read it. The margin is the steps
   the rank runs in :data:`MARGIN_POLLS` poll periods (its step rate, from the steps it saw at its recent looks),
   plus :data:`MIN_MARGIN`: every rank sees the request within one poll period of the first, and reads the file in
   the same look.
2. **Raise when passed.** A rank already past ``at_step`` (its next step is later) writes its own next step + the
   margin over it, at most :data:`MAX_RAISES` times per request; the agreed step is then the largest step any rank
   needed. Past that it logs one line and records no window for that request.
3. **Follow.** Until its window begins, each rank reads the file again at each look and moves its planned window to
   a changed ``at_step``. A rank whose window has begun keeps it.

A dead or slow rank blocks no one: the others never wait for it, and a rank that comes late either adopts the step
(still ahead of it) or raises it (within the margin, the others follow) or, past :data:`MAX_RAISES`, skips with a log
line. A folder that cannot be written falls back to the rank's own proposal, with one log line. A run of one rank
opens at its next step, as before.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> store = AgreementStore(Path(tempfile.mkdtemp()))
    >>> store.create("a1", 120, rank=1), store.create("a1", 150, rank=0), store.read("a1")
    (True, False, 120)
    >>> margin(steps_per_s=50.0, poll_s=2.0)  # 3 polls of 50 steps/s, and 2
    302
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf_callbacks.core.triggers.captures import CaptureSchedule
from perf_callbacks.core.triggers.request_files import (
    REMOTE_CALL_S,
    REQUEST_FILE,
    LazyFs,
    read_remote_small,
    read_small,
    timeout_kw,
    write_request,
)

log = logging.getLogger(__name__)
MARGIN_POLLS = 3
"""Poll periods of steps between the first rank's sight of a request and the agreed step: every rank sees the
request within one period of the first, and a raise reaches the others within two."""
MIN_MARGIN = 2
"""Steps added to the margin: a request read as a step begins still opens after it, on every rank."""
MAX_MARGIN = 1_000_000
MAX_RAISES = 3
"""How often one rank raises the agreed step of one request before it gives that request up (a log line)."""
RATE_LOOKS = 10
"""Looks whose steps set the step rate (the last ones)."""


def agreement_name(request_id: str) -> str:
    """The agreement's file name for the request ``request_id``."""
    return f"capture-{request_id}.json"


def margin(steps_per_s: float | None, poll_s: float) -> int:
    """Steps from a rank's next step to the step it proposes: ``MARGIN_POLLS`` polls of steps, and ``MIN_MARGIN``."""
    ahead = math.ceil(steps_per_s * MARGIN_POLLS * poll_s) if steps_per_s and math.isfinite(steps_per_s) else 0
    return MIN_MARGIN + min(max(ahead, 0), MAX_MARGIN)


class AgreementStore:
    """The agreement files of one run: in its local folder, or in its remote folder (a :class:`LazyFs` and the run).

    Args:
        folder: the run's local folder (None with ``remote``).
        remote: the remote ``output_dir``; the files go into ``<remote>/<run>/``.
        run: the run's name (with ``remote``).
    """

    def __init__(self, folder: Path | None = None, remote: LazyFs | None = None, run: str = "") -> None:
        self.folder, self.remote, self.run = folder, remote, run

    def read(self, request_id: str) -> int | None:
        """The agreed step of ``request_id``; None when there is none yet (or the file is not one)."""
        if self.remote is not None:
            fs, path = self._remote(request_id)
            fs.invalidate_cache(path)
            return _parse(read_remote_small(fs, path), request_id)
        assert self.folder is not None
        return _parse(read_small(self.folder / agreement_name(request_id)), request_id)

    def create(self, request_id: str, at: int, rank: int) -> bool:
        """Write ``at`` unless an agreement is there already; True when this one was written."""
        body = _body(request_id, at, rank)
        if self.remote is not None:
            fs, path = self._remote(request_id)
            try:
                fs.pipe_file(path, body, mode="create", **timeout_kw(fs, REMOTE_CALL_S))
            except FileExistsError:
                return False
            return True
        assert self.folder is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{agreement_name(request_id)}.{os.getpid()}.tmp"
        tmp.write_bytes(body)
        try:
            os.link(tmp, self.folder / agreement_name(request_id))  # atomic, complete, and never over another
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def replace(self, request_id: str, at: int, rank: int) -> None:
        """Write ``at`` over the agreement (a raise)."""
        body = _body(request_id, at, rank)
        if self.remote is not None:
            fs, path = self._remote(request_id)
            fs.pipe_file(path, body, **timeout_kw(fs, REMOTE_CALL_S))
            return
        assert self.folder is not None
        tmp = self.folder / f".{agreement_name(request_id)}.{os.getpid()}.tmp"
        tmp.write_bytes(body)
        os.replace(tmp, self.folder / agreement_name(request_id))

    def _remote(self, request_id: str) -> tuple[Any, str]:
        assert self.remote is not None
        fs, root = self.remote.get()
        return fs, f"{root}/{self.run}/{agreement_name(request_id)}"


class Agreement:
    """One rank's side of the protocol (see the module's docstring), called by its request thread only.

    Args:
        store: where the agreements are.
        schedule: where the windows are planned.
        step_now: the rank's open step (None before the first): read from the training thread's state, no lock.
        poll_s: ``capture_poll_s``.
        rank: this rank.
        clock: seconds, for the step rate.
    """

    def __init__(self, store: AgreementStore, schedule: CaptureSchedule, step_now: Callable[[], int | None],
                 poll_s: float, rank: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.schedule, self.step_now, self.poll_s, self.rank = store, schedule, step_now, poll_s, rank
        self._clock = clock
        self.seen: collections.deque[tuple[float, int]] = collections.deque(maxlen=RATE_LOOKS)
        self.following: dict[str, tuple[int, int | None, int]] = {}  # id -> (agreed step, steps, raises)

    def note(self) -> None:
        """A look: the step now, for the step rate."""
        step = self.step_now()
        if step is not None:
            self.seen.append((self._clock(), step))

    def steps_per_s(self) -> float | None:
        """The rank's steps per second over its recent looks; None before two looks saw steps."""
        if len(self.seen) < 2:
            return None
        (t0, s0), (t1, s1) = self.seen[0], self.seen[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None

    def serve(self, request_id: str, steps: int | None) -> None:
        """A new request: adopt the agreed step, or propose one (see the module's docstring)."""
        proposal = self._next() + margin(self.steps_per_s(), self.poll_s)
        try:
            at = self.store.read(request_id)
            if at is None:
                at = proposal if self.store.create(request_id, proposal, self.rank) else self.store.read(request_id)
        except Exception as err:  # noqa: BLE001 - a folder that fails: this rank's own proposal, said once
            log.info("perf-callbacks: capture request %s: the agreement could not be read or written (%s: %s); this "
                     "rank opens at its own step %d", request_id, type(err).__name__, err, proposal)
            at = proposal
        self._follow(request_id, steps, proposal if at is None else at, 0)

    def recheck(self, skip: set[str]) -> None:
        """A look: read the agreements of the requests whose windows have not begun again; follow a change."""
        step = self.step_now()
        for request_id, (at, steps, raises) in list(self.following.items()):
            if step is not None and step >= at:  # its window began (or it was skipped): no more following
                del self.following[request_id]
                continue
            if request_id in skip:
                continue
            agreed = self.store.read(request_id)
            if agreed is not None and agreed != at:
                self._follow(request_id, steps, agreed, raises)

    def _follow(self, request_id: str, steps: int | None, at: int, raises: int) -> None:
        nxt = self._next()
        if at < nxt:  # past the agreed step: raise it, or give the request up
            if raises >= MAX_RAISES:  # the schedule drops this rank's window for it, with one log line
                self.following.pop(request_id, None)
                self.schedule.request("file", request_id, steps, at=at)
                return
            at, raises = nxt + margin(self.steps_per_s(), self.poll_s), raises + 1
            log.info("perf-callbacks: capture request %s: this rank is past the agreed step; raised to %d",
                     request_id, at)
            self.following[request_id] = (at, steps, raises)
            self.schedule.request("file", request_id, steps, at=at)  # planned first: a folder that fails keeps it
            self.store.replace(request_id, at, self.rank)
            return
        self.following[request_id] = (at, steps, raises)
        self.schedule.request("file", request_id, steps, at=at)

    def _next(self) -> int:
        step = self.step_now()
        return 0 if step is None else step + 1


@dataclass(frozen=True)
class Ranks:
    """What the request thread knows of the run's ranks (see :class:`CaptureRequests`).

    Args:
        world_size: the run's ranks.
        run_dir: the run's local folder (its name is the run's folder in a remote ``output_dir``).
        step_now: the rank's open step (None before the first).
        all_ranks: ``capture_signal_all_ranks``: the signal writes a request file for all ranks.
    """

    world_size: int
    run_dir: Path
    step_now: Callable[[], int | None]
    all_ranks: bool = False

    def agreement(self, schedule: CaptureSchedule, poll_s: float, far: LazyFs | None, rank: int) -> Agreement | None:
        """The agreement on each request's step, for a run of more than one rank."""
        if self.world_size <= 1:
            return None
        store = AgreementStore(None, far, self.run_dir.name) if far is not None else AgreementStore(self.run_dir)
        return Agreement(store, schedule, self.step_now, poll_s, rank)

    def sender(self, far: LazyFs | None) -> Callable[[], str]:
        """Writes a request for all ranks: into the remote ``output_dir``, else into the run's folder; says where."""

        def send() -> str:
            if far is not None:
                fs, root = far.get()
                write_request(root, fs=fs)
                return f"{far.url.rstrip('/')}/{REQUEST_FILE}"
            self.run_dir.mkdir(parents=True, exist_ok=True)
            write_request(self.run_dir)
            return str(self.run_dir / REQUEST_FILE)

        return send


def _body(request_id: str, at: int, rank: int) -> bytes:
    return json.dumps({"id": request_id, "at_step": at, "rank": rank, "t": time.time()}).encode()


def _parse(body: bytes | None, request_id: str) -> int | None:
    try:
        data = json.loads(body) if body else None
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("id") != request_id:
        return None
    at = data.get("at_step")
    return at if isinstance(at, int) and not isinstance(at, bool) and at >= 0 else None

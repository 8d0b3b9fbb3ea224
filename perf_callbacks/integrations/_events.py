"""Our own TensorBoard event file, for adapters whose framework has no tracker configured.

Written on the training thread at logging steps, a few records at a time: each write opens the file, appends whole
records and closes it, so there is no writer thread to die with a traceback (TensorBoard's ``SummaryWriter`` writes
from a daemon thread that prints ``Exception in thread`` and then raises the stored error into the next
``add_scalar``), nothing is left buffered at close, and a deleted or full output folder is seen at the write that
meets it. That write is undone (the file is cut back to its last whole record, or removed if it held none), the
``events`` writer is turned off with one warning (:class:`~perf_callbacks.core.files.outputs.Outputs`), and training
goes on. The file is named as ``SummaryWriter`` names its files, with a ``.perf-callbacks`` suffix so that it never
takes the name of a writer of the user's in the same folder.
"""

from __future__ import annotations

import io
import itertools
import os
import socket
import time
from pathlib import Path

from perf_callbacks.core.files.outputs import Outputs, make_dirs, remove_empty

_FILE_IDS = itertools.count()


class EventFile:
    """Appends scalar and text summaries to one TensorBoard event file under ``log_dir``, created at the first write.

    Args:
        log_dir: the folder of the event file.
        outputs: the run's writers (``events`` is turned off at the first failure).
    """

    def __init__(self, log_dir: Path, outputs: Outputs) -> None:
        self.log_dir, self.outputs = log_dir, outputs
        try:  # at setup: a first import in a logging step (about a second) delays the other ranks' step
            _import_writers()
        except Exception as err:  # noqa: BLE001 - no TensorBoard: no events, one warning, training goes on
            outputs.failed("events", err, log_dir)
        self.path: Path | None = None
        self.size = 0  # bytes of whole records written so far
        self._made: list[Path] = []  # folders created for the file, removed if its first write fails

    def scalars(self, values: dict[str, float], step: int) -> None:
        """One scalar summary per key at ``step``."""
        if self.outputs.enabled("events") and values:
            from torch.utils.tensorboard.summary import scalar

            self._append([scalar(key, float(value)) for key, value in values.items()], step)  # type: ignore[no-untyped-call]

    def text(self, tag: str, text: str, step: int) -> None:
        """A text summary (the window summary) at ``step``."""
        if self.outputs.enabled("events"):
            from torch.utils.tensorboard.summary import text as text_summary

            self._append([text_summary(tag, text)], step)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Nothing is buffered: every write is complete when it returns."""

    def _append(self, summaries: list[object], step: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        now = time.time()
        events = [Event(wall_time=now, step=step, summary=s) for s in summaries]
        try:
            if self.path is None:
                self._made = make_dirs(self.log_dir)
                self.path = self.log_dir / _file_name(now)
                events.insert(0, Event(wall_time=now, file_version="brain.Event:2"))
            data = _records([e.SerializeToString() for e in events])
            with open(self.path, "ab" if self.size else "xb") as f:
                f.write(data)
            self.size += len(data)
        except Exception as err:  # noqa: BLE001 - a failing output never reaches training
            self._undo()
            self.outputs.failed("events", err, self.path or self.log_dir)

    def _undo(self) -> None:
        """Cut the file back to its last whole record; remove it (and the folders made for it) if it held none."""
        if self.path is None:
            return
        try:
            if self.size:
                os.truncate(self.path, self.size)
            else:
                self.path.unlink(missing_ok=True)
                remove_empty(self._made)
        except OSError:
            pass


def _import_writers() -> None:
    """Import what a write needs (TensorBoard's summaries, protobufs and record framing) now, not at the first write.

    Rank 0 sets its own time aside, but the other ranks meet it at their next collective: an import of about a second
    at the first logging step would be counted as their step time.
    """
    from tensorboard.compat.proto import event_pb2  # noqa: F401
    from tensorboard.summary.writer import record_writer  # noqa: F401
    from torch.utils.tensorboard import summary  # noqa: F401


def _file_name(now: float) -> str:
    return f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_IDS)}.perf-callbacks"


def _records(payloads: list[bytes]) -> bytes:
    """TFRecord framing (length, CRCs) as TensorBoard's own ``RecordWriter`` writes it."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    buffer = io.BytesIO()
    writer = RecordWriter(buffer)
    for payload in payloads:
        writer.write(payload)
    return buffer.getvalue()

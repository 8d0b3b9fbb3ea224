"""Where a run's files are: the traces it exported, and where each is now (local, or uploaded to ``output_dir``).

A part of :class:`~perf_callbacks.core.engine.engine.PerfEngine` (``engine.files``): the engine's windows
(``core/windows/recorder.py``) write the files, and under a remote ``output_dir`` its uploads (``core/files/remote.py``)
move them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from perf_callbacks.core.files.traces import TraceLayout
from perf_callbacks.core.windows.recorder import WindowRecorder


class RunFiles:
    """The engine's files: :attr:`exported`, :attr:`exported_urls`, :meth:`locate` and :attr:`layout`.

    Args:
        windows: the engine's windows, that write them (and upload them, under a remote ``output_dir``).
    """

    def __init__(self, windows: WindowRecorder) -> None:
        self.windows = windows

    @property
    def exported(self) -> list[Any]:
        """Trace files written so far, as local paths (a window's file appears once its background job finished).

        With a remote ``output_dir`` these are the staged copies, removed once uploaded: see :attr:`exported_urls`
        and :meth:`locate`.
        """
        return self.windows.exported

    @property
    def exported_urls(self) -> list[str]:
        """With a remote ``output_dir``, the URL each trace of :attr:`exported` is uploaded to (same order); else []."""
        uploads = self.windows.uploads
        return [uploads.url_of(p) for p in self.exported] if uploads is not None else []

    def locate(self, path: str | os.PathLike[str]) -> str:
        """Where a file or folder this run wrote (``exported``, ``layout.run_dir``...) is now.

        Its local path, except under a remote ``output_dir`` once its upload was confirmed (its staged copy is gone):
        then its URL. A file whose upload failed stays at its local path, as the warning said.
        """
        uploads, path = self.windows.uploads, Path(path)
        if uploads is None or path.exists() or uploads.staging not in (path, *path.parents):
            return str(path)
        return uploads.url_of(path)

    @property
    def layout(self) -> TraceLayout:
        """Where this run's windows go."""
        return self.windows.layout

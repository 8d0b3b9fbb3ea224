"""Finding traces by content: one file, a window folder of per-rank traces, or a whole ``output_dir``.

Any ``.json`` or ``.json.gz`` file (``.pt.trace.json.gz`` included) whose start looks like a Kineto trace is a trace,
whatever its name. So is a file that cannot be read (a broken gzip) or is named ``*.trace.json[.gz]``: reading it
then fails with a reason that the report prints. Other files that end like a trace but are not one are listed with
the reason, so that an empty result can say what was found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from perf_callbacks.analysis.trace.loader import is_candidate, is_tensorboard_events, sniff
from perf_callbacks.analysis.trace.sidecar_store import read_sidecar

_WINDOW = re.compile(r"window-(\d+)-(\d+)")
MERGED_NAME = "merged-ranks.pt.trace.json.gz"
"""The one-timeline trace of several ranks that ``report --merge-ranks`` writes into a window folder."""
WHERE_TRACES_ARE = ("perf-callbacks writes its traces to output_dir, by default <log_dir>/perf (Accelerate: "
                    "<project_dir>/perf or ./perf; transformers: <output_dir>/perf), one window-AAAAAA-BBBBBB folder "
                    "per profiling window: pass that folder, a run or window folder in it, or one .pt.trace.json.gz "
                    "file")
"""The hint given whenever a path holds no trace."""


@dataclass(frozen=True)
class Window:
    """One profiling window: a folder (or a single file) holding one trace per rank.

    Args:
        path: the window folder, or the trace file itself.
        files: the trace files, one per rank.
    """

    path: Path
    files: list[Path] = field(default_factory=list)

    @property
    def expected_steps(self) -> int | None:
        """How many steps a folder named ``window-AAAAAA-BBBBBB`` promises (``BBBBBB - AAAAAA + 1``), else None."""
        match = _WINDOW.fullmatch(self.path.name)
        return int(match.group(2)) - int(match.group(1)) + 1 if match else None


@dataclass
class Discovery:
    """What ``discover`` found.

    Args:
        windows: the windows, most recent first.
        skipped: files with a trace's name ending that are not traces, each with why.
    """

    windows: list[Window]
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def discover(path: str | Path, sidecars: bool = True) -> Discovery:
    """List the windows under ``path``, most recent first (newest trace file modification time, then name).

    Args:
        path: a trace file, a window folder of traces, or an ``output_dir`` holding window folders.
        sidecars: a file that a matching sidecar names is a trace, unread (see :func:`not_a_trace`).

    Raises:
        FileNotFoundError: when ``path`` does not exist or holds no trace; the message says what was found instead.
    """
    root = Path(path)
    if root.is_file():
        if is_tensorboard_events(root):
            raise FileNotFoundError(f"{root} is a TensorBoard event file, not a trace; {WHERE_TRACES_ARE}")
        return Discovery([Window(root, [root])])
    if root.exists() and not root.is_dir():
        raise FileNotFoundError(f"{root} is not a regular file or a folder (a FIFO, a device or a socket): not read")
    if not root.is_dir():
        raise FileNotFoundError(f"no trace file or folder at {root}")
    groups: dict[Path, list[Path]] = {}
    skipped: list[tuple[Path, str]] = []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and is_candidate(p) and not _hidden(p, root)):
        why = not_a_trace(f, sidecars)
        if why is None:
            groups.setdefault(f.parent, []).append(f)
        else:
            skipped.append((f, why))
    if not groups:
        raise FileNotFoundError(_nothing_found(root, skipped))
    windows = [Window(folder, files) for folder, files in groups.items()]
    windows.sort(key=lambda w: (max(f.stat().st_mtime for f in w.files), str(w.path)), reverse=True)
    return Discovery(windows, skipped)


def not_a_trace(path: Path, sidecars: bool = True) -> str | None:
    """Why the candidate ``path`` is not a trace, or None when it is one.

    A file that a matching sidecar names (``sidecars``) is one without being read: on object storage, its report
    downloads nothing of it. Otherwise its start is read: a file that cannot be read, or is named
    ``*.trace.json[.gz]``, counts as a trace (reading it then fails with the reason the report prints).
    """
    if sidecars and read_sidecar(path) is not None:
        return None
    why = sniff(path)
    return None if why is None or why.startswith("unreadable") or ".trace.json" in path.name else why


def find_windows(path: str | Path) -> list[Window]:
    """The windows of ``discover(path)``, most recent first."""
    return discover(path).windows


def _hidden(path: Path, root: Path) -> bool:
    """A hidden file or folder, a hang watchdog's ``hang-rank{R}`` folder, or a merged trace (not one more rank)."""
    return path.name == MERGED_NAME or any(part.startswith((".", "hang-rank")) for part in path.relative_to(root).parts)


def _nothing_found(root: Path, skipped: list[tuple[Path, str]]) -> str:
    events = sum(1 for p in root.rglob("events.out.tfevents*") if p.is_file() and not _hidden(p, root))
    held = f" (it holds {events} TensorBoard event file{'s' if events > 1 else ''}: metrics, not traces)" if events \
        else ""
    if not skipped:
        return f"no .json or .json.gz file under {root}{held}; {WHERE_TRACES_ARE}"
    shown = "; ".join(f"{p.relative_to(root)} ({why})" for p, why in skipped[:5])
    more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    return f"no Kineto trace under {root}{held}: {len(skipped)} .json/.json.gz file(s) found, none is a trace: " \
           f"{shown}{more}; {WHERE_TRACES_ARE}"

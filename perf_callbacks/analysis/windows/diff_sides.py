"""Which window of each side ``perf-callbacks diff`` compares, and analysing the two sides (in parallel when large).

By default each side is its most recent *complete* window, the window ``report`` makes its headline: a folder named
``window-FIRST-LAST`` is complete when every rank's trace holds all ``LAST - FIRST + 1`` ProfilerSteps (a window cut
short by an exception, Ctrl-C or the end of training holds fewer) and neither its sidecars nor its ``summary.txt`` say
it is partial. A window with an unreadable file is skipped too, and named in the description's ``skipped``. Folders
and files with other names count as complete. ``window`` picks another: an index into the windows, most recent first
(``0`` is the latest), or a window folder name such as ``window-000012-000014``.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.diff.compare import DiffResult, compare
from perf_callbacks.analysis.results.result import AnalysisResult
from perf_callbacks.analysis.trace.discover import Window, find_windows
from perf_callbacks.analysis.windows.api import analyze_window, window_from_sidecars

WINDOW_NAME = re.compile(r"window-(\d+)-(\d+)")
OPS_TOP_K = 1000
PARALLEL_MIN_BYTES = 4 << 20
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]
_CHILD = "from perf_callbacks.analysis.windows.diff_sides import _child; _child()"


def diff_paths(
    base: str | Path, new: str | Path, base_window: str | None = None, new_window: str | None = None,
    parallel: bool | None = None,
) -> DiffResult:
    """Pick and analyse one window on each side, then ``compare`` them.

    Args:
        base: anything ``perf-callbacks report`` accepts: a trace, a window folder, a run folder or an output dir.
        new: the same, for the side to judge.
        base_window: an index (``"0"`` = latest) or a window folder name; None for the latest complete window.
        new_window: the same for ``new``.
        parallel: analyse ``new`` in a child Python process while this one analyses ``base``; None decides by size
            (at least ``PARALLEL_MIN_BYTES`` of traces in all, and more than one CPU). The child is a plain
            ``python -c`` process, not ``multiprocessing``, so scripts without a ``__main__`` guard can call this.

    Raises:
        FileNotFoundError: when a side holds no trace.
        ValueError: when a window is not found, or a side has no events or no ProfilerStep span.
    """
    if parallel is None:
        parallel = (os.cpu_count() or 1) > 1 and _size(base) + _size(new) >= PARALLEL_MIN_BYTES
    if parallel:
        child = _start(new, new_window)
        try:
            b = load_side(base, base_window)
            n = _finish(child, *child.communicate())
        except BaseException:  # Ctrl-C included: the child is not left running
            child.kill()
            child.wait()
            raise
    else:
        b, n = load_side(base, base_window), load_side(new, new_window)
    result = compare(b[0], n[0])
    result.base.update(b[1])
    result.new.update(n[1])
    return result


def load_side(path: str | Path, window: str | None = None) -> tuple[AnalysisResult, dict[str, Any]]:
    """Analyse the chosen window of ``path`` (all ops kept, timelines dropped); returns it with a description.

    Without ``window``, the most recent complete window, looking at every window, most recent first (a window whose
    sidecars already say it is partial is not parsed); without any, the most recent one that can be read. A window
    with a file that cannot be read is never used.

    The description has ``path`` (as given), ``window`` (the folder or file analysed), ``window_index`` (0 = most
    recent), ``complete``, ``windows`` (how many windows the path holds) and ``skipped`` (one line per window left
    out because a file in it cannot be read).

    Raises:
        ValueError: when no window can be used (each one's reason is in the message), or the chosen one has a file
            that cannot be read.
    """
    windows = find_windows(path)
    if window is not None:
        index = pick_window(windows, window)
        chosen = _analyse(windows[index])
        if chosen.errors:
            raise ValueError(f"window {windows[index].path} has unreadable files: " + "; ".join(chosen.errors))
        return _described(path, windows, index, chosen, [])
    tried: dict[int, AnalysisResult | None] = {}
    skipped: list[str] = []
    for index, w in enumerate(windows):
        cheap = window_from_sidecars(w)
        if cheap is not None and not is_complete(w, cheap):
            continue
        tried[index] = result = _usable(w, skipped)
        if result is not None and is_complete(w, result):
            return _described(path, windows, index, result, skipped)
    for index, w in enumerate(windows):  # no complete window: the most recent readable one
        result = tried[index] if index in tried else _usable(w, skipped)
        if result is not None:
            return _described(path, windows, index, result, skipped)
    raise ValueError(f"no usable window under {path}: " + "; ".join(skipped))


def windows_read(path: str | Path, window: str | None = None) -> list[Window]:
    """The windows whose traces :func:`load_side` parses, where sidecars say as much without the traces.

    A window whose sidecars say it is complete is the one chosen; one without them is parsed here to know (a remote
    mirror holds such traces whole). With no complete window, every window is read.
    """
    windows = find_windows(path)
    if window is not None:
        return [windows[pick_window(windows, window)]]
    for w in windows:
        cheap = window_from_sidecars(w)
        if cheap is not None and is_complete(w, cheap):
            return [w]
        if cheap is None and (result := _usable(w, [])) is not None and is_complete(w, result):
            return [w]
    return windows


def _usable(window: Window, skipped: list[str]) -> AnalysisResult | None:
    """The window's result, or None (with the reason added to ``skipped``) when a file of it cannot be read."""
    try:
        result = _analyse(window)
    except ValueError as err:
        skipped.append(str(err))
        return None
    if result.errors:
        skipped.append(f"window {window.path}: {'; '.join(result.errors)}")
        return None
    return result


def pick_window(windows: list[Window], spec: str) -> int:
    """Index of the window named by ``spec``: an index, most recent first, or a window folder (or file) name.

    Raises:
        ValueError: naming the windows there are, when none matches.
    """
    if spec.lstrip("-").isdigit():
        index = int(spec)
        if -len(windows) <= index < len(windows):
            return index % len(windows)
    for i, w in enumerate(windows):
        if spec in (w.path.name, str(w.path)):
            return i
    names = ", ".join(f"{i}: {w.path.name}" for i, w in enumerate(windows))
    raise ValueError(f"no window {spec!r}; the windows there, most recent first, are {names}")


def is_complete(window: Window, result: AnalysisResult) -> bool:
    """Whether the window is whole: not partial as ``report`` judges it, and every rank holds every step.

    The steps are those the ``window-FIRST-LAST`` folder name announces; other names announce none.
    """
    match = WINDOW_NAME.fullmatch(window.path.name)
    if result.partial:
        return False
    if match is None:
        return True
    expected = int(match.group(2)) - int(match.group(1)) + 1
    return all(len(r.steps) >= expected for r in result.ranks)


def _analyse(window: Window) -> AnalysisResult:
    try:
        result = analyze_window(window, OPS_TOP_K)
    except (EOFError, OSError, zlib.error) as err:  # a truncated or corrupt file: name it
        raise ValueError(f"cannot read {window.path}: {err}") from err
    for r in result.ranks:
        r.timeline = None  # not compared, and large to send between processes
    return result


def _described(
    path: str | Path, windows: list[Window], index: int, result: AnalysisResult, skipped: list[str]
) -> tuple[AnalysisResult, dict[str, Any]]:
    w = windows[index]
    info = {"path": str(path), "window": str(w.path), "window_index": index, "complete": is_complete(w, result),
            "windows": len(windows), "skipped": list(dict.fromkeys(skipped))}
    return result, info


def _size(path: str | Path) -> int:
    try:
        return sum(f.stat().st_size for f in find_windows(path)[0].files)
    except (OSError, IndexError):
        return 0


def _start(path: str | Path, window: str | None) -> subprocess.Popen[bytes]:
    paths = [str(_PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    cmd = [sys.executable, "-c", _CHILD, str(path), "" if window is None else window]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def _finish(child: subprocess.Popen[bytes], out: bytes, err: bytes) -> tuple[AnalysisResult, dict[str, Any]]:
    if child.returncode != 0 or not out:
        raise RuntimeError(f"the process analysing the new side failed: {err.decode(errors='replace')[-2000:]}")
    status, value = pickle.loads(out)
    if status == "error":
        raise value
    return value  # type: ignore[no-any-return]


def _child() -> None:
    """Entry point of the child process: analyse ``argv[1]`` (window ``argv[2]``), write the pickled outcome."""
    try:
        outcome: tuple[str, Any] = ("ok", load_side(sys.argv[1], sys.argv[2] or None))
    except (OSError, ValueError, EOFError) as err:
        outcome = ("error", err)
    sys.stdout.buffer.write(pickle.dumps(outcome))

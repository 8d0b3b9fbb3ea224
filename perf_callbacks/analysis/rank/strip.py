"""The HTML report's timeline strip: the window in ``WIDTH`` pixels, each the cause that fills most of it.

It is computed from the timeline when a trace is analysed and kept in the rank result as a short run-length text
(``"120c3h877."``: 120 pixels of compute, 3 of host, 877 empty), so that it travels in sidecars: a report read from
sidecars draws the same strip as one that parses the traces.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable

from perf_callbacks.analysis.trace.timeline import CAUSES, Timeline

WIDTH = 1000
CODE = {"compute": "c", "copy": "y", "communication": "m", "input": "i", "sync": "s", "host": "h", "other": "o",
        "backlog": "b"}
"""One letter per cause; ``.`` is a pixel that no segment covers (time set aside)."""
_CAUSE = {v: k for k, v in CODE.items()}
_RUN = re.compile(r"(\d+)([a-z.])")
assert set(CODE) == set(CAUSES)


def encode(tl: Timeline | None) -> str:
    """The strip of ``tl`` as run-length text; empty without a timeline or for an empty window.

    Example:
        >>> encode(Timeline(0.0, 10.0, [(0.0, 4.0, "compute"), (4.0, 10.0, "host")]))
        '400c600h'
    """
    if tl is None or tl.hi <= tl.lo:
        return ""
    scale = WIDTH / (tl.hi - tl.lo)
    buckets: list[dict[str, float]] = [{} for _ in range(WIDTH)]
    for a, b, cause in tl.segments:
        for px in range(max(int((a - tl.lo) * scale), 0), min(int((b - tl.lo) * scale), WIDTH - 1) + 1):
            lo, hi = max(a, tl.lo + px / scale), min(b, tl.lo + (px + 1) / scale)
            if hi > lo:
                buckets[px][cause] = buckets[px].get(cause, 0.0) + hi - lo
    letters = [CODE[max(b.items(), key=lambda kv: kv[1])[0]] if b else "." for b in buckets]
    return "".join(f"{len(run.group())}{run.group()[0]}" for run in re.finditer(r"(.)\1*", "".join(letters)))


def decode(text: str) -> list[str | None]:
    """The cause of each pixel (None where nothing was running or the time was set aside).

    Example:
        >>> decode("2c1.1h")
        ['compute', 'compute', None, 'host']
    """
    out: list[str | None] = []
    for n, letter in _RUN.findall(text):
        out += [_CAUSE.get(letter)] * int(n)
    return out


NAMED_PX = 3
"""Runs of the strip at least this many pixels wide get the name of the kernel that ran longest in them."""
NAME_CHARS = 80
"""A run's kernel name is cut to this many characters (the sidecar stays small)."""


def run_names(strip: str, lo: float, hi: float, work: Iterable[tuple[float, float, str]]) -> list[str]:
    """For each run of ``strip`` (``lo``-``hi`` in microseconds), the device work that ran longest in it.

    ``work`` is ``(start, end, name)`` of the device's kernels and copies; each is counted in the run where it starts.
    Runs narrower than ``NAMED_PX`` pixels, and idle runs, get ``""``.

    Example:
        >>> run_names("400c600h", 0.0, 10.0, [(0.0, 1.0, "gemm"), (1.0, 3.5, "relu"), (5.0, 6.0, "sum")])
        ['relu', '']
    """
    runs = [(int(n), letter) for n, letter in _RUN.findall(strip)]
    if not runs or hi <= lo:
        return []
    starts, px = [], 0
    for n, _ in runs:
        starts.append(px)
        px += n
    scale = WIDTH / (hi - lo)
    spent: list[dict[str, float]] = [{} for _ in runs]
    for a, b, name in work:
        if lo <= a < hi:
            i = bisect_right(starts, int((a - lo) * scale)) - 1
            spent[i][name] = spent[i].get(name, 0.0) + min(b, hi) - a
    out = []
    for (n, letter), names in zip(runs, spent, strict=True):
        named = n >= NAMED_PX and letter in "cmy" and names
        top = max(names.items(), key=lambda kv: kv[1])[0] if named else ""
        out.append(top if len(top) <= NAME_CHARS else top[: NAME_CHARS - 1] + "…")
    return out

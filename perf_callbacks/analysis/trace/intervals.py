"""Pure interval arithmetic on sorted ``(start, end)`` pairs: union, clipping, overlap, gaps, the span at a time."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate
from typing import Any

Span = tuple[float, float]


def union(spans: Iterable[Span]) -> list[Span]:
    """Merge overlapping spans; the input need not be sorted.

    Example:
        >>> union([(0, 2), (1, 3), (5, 6)])
        [(0, 3), (5, 6)]
    """
    merged: list[Span] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


def total(spans: Iterable[Span]) -> float:
    """Sum of lengths (of already merged spans).

    Example:
        >>> total([(0, 3), (5, 6)])
        4
    """
    return sum(b - a for a, b in spans)


def clip(merged: list[Span], lo: float, hi: float) -> list[Span]:
    """Return the parts of merged spans inside ``[lo, hi]``.

    Example:
        >>> clip([(0, 3), (5, 9)], 2, 6)
        [(2, 3), (5, 6)]
    """
    out = []
    for a, b in merged[max(bisect_right(merged, (lo, lo)) - 1, 0) :]:
        if a >= hi:
            break
        if b > lo:
            out.append((max(a, lo), min(b, hi)))
    return out


def overlap(a: list[Span], b: list[Span]) -> float:
    """Length of the intersection of two merged span lists.

    Example:
        >>> overlap([(0, 4)], [(1, 2), (3, 6)])
        2.0
    """
    i = j = 0
    got = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            got += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return got


def subtract(a: list[Span], b: list[Span]) -> list[Span]:
    """Return the parts of merged spans ``a`` not covered by merged spans ``b``.

    Example:
        >>> subtract([(0, 10)], [(2, 3), (5, 6)])
        [(0, 2), (3, 5), (6, 10)]
    """
    out: list[Span] = []
    j = 0
    for lo, hi in a:
        while j < len(b) and b[j][1] <= lo:
            j += 1
        k, cur = j, lo
        while k < len(b) and b[k][0] < hi:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < hi:
            out.append((cur, hi))
    return out


def intersect(a: list[Span], b: list[Span]) -> list[Span]:
    """Return the parts of merged spans ``a`` that merged spans ``b`` cover.

    Example:
        >>> intersect([(0, 10)], [(2, 3), (8, 12)])
        [(2, 3), (8, 10)]
    """
    return subtract(a, subtract(a, b))


def gaps(merged: list[Span], lo: float, hi: float) -> list[Span]:
    """Return the parts of ``[lo, hi]`` that no merged span covers.

    Example:
        >>> gaps([(1, 2), (4, 5)], 0, 6)
        [(0, 1), (2, 4), (5, 6)]
    """
    return subtract([(lo, hi)], merged)


class Holders:
    """Rows that start with ``(start, end)``, indexed for "the latest-starting row that holds ``t``".

    Each question takes about log time: a whole scan per question made one rank's NCCL kernels quadratic.

    Example:
        >>> h = Holders([(0, 10, "outer"), (2, 4, "inner"), (6, 8, "late")])
        >>> h.at(3), h.at(5), h.at(11)
        ((2, 4, 'inner'), (0, 10, 'outer'), None)
    """

    def __init__(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self.rows = sorted(rows, key=lambda r: r[0])  # stable: rows of one start keep their order
        self.starts = [r[0] for r in self.rows]
        self.reach = list(accumulate((r[1] for r in self.rows), max))  # the latest end up to each row

    def at(self, t: float) -> Any:
        """The latest-starting row with ``start <= t <= end`` (the first given of several such), or None."""
        j = bisect_right(self.starts, t) - 1
        while j >= 0 and self.reach[j] >= t:
            if self.rows[j][1] >= t:
                first = bisect_left(self.starts, self.starts[j])
                return next(r for r in self.rows[first:j + 1] if r[1] >= t)
            j -= 1
        return None

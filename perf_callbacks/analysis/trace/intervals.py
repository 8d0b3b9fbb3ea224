"""Pure interval arithmetic on sorted ``(start, end)`` pairs: union, clipping, overlap and gaps."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

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

"""``Holders`` answers "the latest-starting span that holds t" as a scan of every span does, nested, tied and disjoint
spans alike (the scan made one rank's NCCL kernels quadratic)."""

from __future__ import annotations

import random

from perf_callbacks.analysis.trace.intervals import Holders


def _scan(rows: list[tuple[float, float, int]], t: float) -> tuple[float, float, int] | None:
    inside = [r for r in rows if r[0] <= t <= r[1]]
    return max(inside, key=lambda r: r[0]) if inside else None


def test_holders_answer_as_a_scan_of_every_span_does() -> None:
    rng = random.Random(53)
    for case in range(300):
        n = rng.randint(0, 30)
        rows = []
        for i in range(n):
            start = float(rng.randint(0, 40))
            rows.append((start, start + rng.choice([0.0, 1.0, 3.0, 10.0, 50.0]), i))  # ties, instants, nesting
        holders = Holders(rows)
        for t in [x / 2 for x in range(-2, 200)]:
            assert holders.at(t) is _scan(rows, t), (case, t)

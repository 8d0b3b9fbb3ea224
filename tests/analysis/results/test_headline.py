"""The headline scalars read the right row: the collective that moved the most bytes, not the first or the slowest."""

from __future__ import annotations

from typing import Any

from perf_callbacks.analysis.results.headline import headline_scalars


def _row(name: str, nbytes: int | None, ms: float, busbw: float | None) -> dict[str, Any]:
    return {"name": name, "bytes": nbytes, "total_ms": ms, "busbw_gbps": busbw}


def test_comm_busbw_is_that_of_the_collective_that_moved_the_most_bytes() -> None:
    rows = [_row("Broadcast", 1_000, 9.0, 0.1),  # the most time (rows come sorted by time), few bytes
            _row("AllReduce", 8_000_000, 2.0, 7.0),  # the most bytes
            _row("AllGather", 2_000_000, 1.0, 3.0),
            _row("Barrier", None, 5.0, None)]  # no size: never the headline
    assert headline_scalars(rows, [], None)["comm_busbw_gbps"] == 7.0
    assert headline_scalars(rows[::-1], [], None)["comm_busbw_gbps"] == 7.0
    assert headline_scalars([rows[3]], [], None)["comm_busbw_gbps"] is None

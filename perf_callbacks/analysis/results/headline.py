"""The headline figures of the communication, transfer and launch measures, as TensorBoard scalars."""

from __future__ import annotations

from typing import Any


def headline_scalars(communication: list[dict[str, Any]], copy_rows: list[dict[str, Any]],
                     launch_figures: dict[str, Any] | None) -> dict[str, float | None]:
    """TensorBoard figures: busbw of the collective that moved the most bytes, HtoD GB/s, launch p95.

    ``AnalysisResult.scalars`` logs them as ``perf/window/<name>``.

    Example:
        >>> headline_scalars([], [{"kind": "HtoD", "memory": "pinned", "bytes": 2e9, "total_ms": 100.0}], None)
        {'comm_busbw_gbps': None, 'htod_gbps': 20.0, 'launch_p95_us': None}
    """
    sized = [c for c in communication if c["busbw_gbps"] is not None and c["bytes"]]
    largest = max(sized, key=lambda c: c["bytes"], default=None)
    htod = [c for c in copy_rows if c["kind"] == "HtoD" and c["bytes"] is not None]
    htod_ms = sum(c["total_ms"] for c in htod)
    return {
        "comm_busbw_gbps": largest["busbw_gbps"] if largest else None,
        "htod_gbps": sum(c["bytes"] for c in htod) / htod_ms / 1e6 if htod_ms > 0 else None,
        "launch_p95_us": launch_figures["p95_us"] if launch_figures else None,
    }

"""A window's TensorBoard scalars: the flat ``perf/window/...`` numbers that ``AnalysisResult.scalars`` gives."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from perf_callbacks.analysis.results.headline import headline_scalars
from perf_callbacks.analysis.results.parts import Measures, MemoryParts, MfuParts

_WORLD = re.compile(r"\bworld_size=(\d+)")  # in RankResult.run_id, from the trace's distributedInfo


class RankFigures(Protocol):
    """What the scalars read of a ``RankResult``."""

    losses: dict[str, float]
    collectives_ms: list[float]
    measures: Measures
    loader: dict[str, Any] | None
    data_wait_fraction: float
    run_id: str


class WindowFigures(Protocol):
    """What the scalars read of an ``AnalysisResult``."""

    gpu_utilization: float | None
    data_wait_fraction: float
    step_time_ms: float | None
    imbalance_ratio: float | None
    memory: MemoryParts
    efficiency: MfuParts
    measures: Measures

    @property
    def ranks(self) -> Sequence[RankFigures]:
        """One result per rank (read only, so that a list of ``RankResult`` is one)."""
        ...


def window_scalars(result: WindowFigures) -> dict[str, float]:
    """Flat ``perf/window/...`` numbers for TensorBoard, once per window; missing values are left out.

    Communication figures (``communication_fraction``, ``comm_busbw_gbps``) only for a distributed window: more
    than one rank, a collective, or a trace recorded with a world size above 1.
    """
    values: dict[str, float | None] = {
        "gpu_utilization": result.gpu_utilization,
        "data_wait_fraction": result.data_wait_fraction,
        "step_time_ms": result.step_time_ms,
        "peak_memory_gb": None if result.memory.peak_bytes is None else result.memory.peak_bytes / 1e9,
        "imbalance_ratio": result.imbalance_ratio,
        "mfu": result.efficiency.mfu,
        "achieved_tflops": result.efficiency.achieved_tflops,
    }
    for cause in ("sync", "host", "copy", "communication", "other", "cpu_contention"):
        shares = [r.losses[cause] for r in result.ranks if cause in r.losses]
        key = {"sync": "host_sync", "host": "launch_overhead", "other": "unexplained_idle"}.get(cause, cause)
        values[f"{key}_fraction"] = sum(shares) / len(shares) if shares else None
    values.update(_wait_parts(result.ranks))
    values.update(headline_scalars(result.measures.communication, result.measures.copies, result.measures.launch))
    if not _distributed(result.ranks):
        values["communication_fraction"] = values["comm_busbw_gbps"] = None
    return {f"perf/window/{k}": float(v) for k, v in values.items() if v is not None}


_PARTS = {"on_cpu": "data_wait_on_cpu_fraction", "blocked": "data_wait_blocked_fraction",
          "waiting_for_cpu": "data_wait_cpu_contention_fraction"}


def _wait_parts(ranks: Sequence[RankFigures]) -> dict[str, float | None]:
    """The data wait's measured parts as shares of the window (the loader block's ``wait_split``), mean over ranks."""
    split = [(r.data_wait_fraction, r.loader["wait_split"]) for r in ranks if r.loader and r.loader.get("wait_split")]
    if not split:
        return {}
    return {tag: sum(w * parts[part] for w, parts in split) / len(split) for part, tag in _PARTS.items()}


def _distributed(ranks: Sequence[RankFigures]) -> bool:
    """Whether a window is of a distributed run: several ranks, a collective, or ``distributedInfo.world_size > 1``.

    Example:
        >>> _distributed([])
        False
    """
    if len(ranks) > 1 or any(r.collectives_ms or r.measures.communication for r in ranks):
        return True
    return any((m := _WORLD.search(r.run_id)) is not None and int(m.group(1)) > 1 for r in ranks)

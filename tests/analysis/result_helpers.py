"""Results built by hand and damaged inputs, shared by the analysis tests and the CLI's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perf_callbacks.analysis.judge.verdict import judge_rank
from perf_callbacks.analysis.results.result import RankResult


def rank(**fields: Any) -> RankResult:
    base: dict[str, Any] = {
        "rank": 0, "path": "rank0.pt.trace.json.gz", "span_ms": 100.0, "gpu_utilization": 0.5,
        "kernel_busy_fraction": None, "step_time_ms": None, "data_wait_fraction": 0.0, "losses": {}, "steps": [],
        "copies_ms": {}, "comm_ms": {}, "top_ops": [], "profiler_flags": [], "data_loader": None, "collectives_ms": [],
        "sync_calls_ms": {},
        "launches_per_step": None,
    }
    r = RankResult(**{**base, **fields})
    judge_rank(r)
    return r


def deep_trace(path: Path, depth: int = 100_000) -> Path:
    """A small trace whose one argument is a list nested ``depth`` levels deep (json.loads recurses into it)."""
    arg = "[" * depth + "]" * depth
    path.write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, '
                    f'"dur": 2, "args": {{"device": 0, "deep": {arg}}}}}]}}')
    return path

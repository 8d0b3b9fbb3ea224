"""Damaged sidecars for the tests that a sidecar is validated like any input: each kind of damage by name.

Values no trace gives (text FLOPs, NaN, infinity, shares outside [0, 1], negative times) and, for the last three, the
figures of another trace (``compute_bound``, its name and size forged to match) with a contradiction of the trace's
place: another window than its folder, another rank than its file name, more steps than the window recorded.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.sidecar import write_sidecar
from tests.analysis.conftest import fixture_trace


def _flops(count: Any) -> dict[str, Any]:
    return {"flops_per_step": count, "peak_tflops": 989.0, "note": "", "source": "", "peak_source": "", "dtype": ""}


def _scale_steps(rank: dict[str, Any], factor: float) -> None:
    for step in rank["steps"]:
        step["time_ms"] *= factor


def _one_more_step(rank: dict[str, Any]) -> None:
    rank["steps"].append({**rank["steps"][-1], "step": rank["steps"][-1]["step"] + 1})


DAMAGE: dict[str, Callable[[dict[str, Any], dict[str, Any]], object]] = {  # on the rank result and the meta
    "flops_text": lambda rank, meta: rank.update(flops=_flops("4e12")),
    "flops_negative": lambda rank, meta: rank.update(flops=_flops(-4e18)),
    "nan_utilization": lambda rank, meta: rank.update(gpu_utilization=float("nan")),
    "negative_data_wait": lambda rank, meta: rank.update(data_wait_fraction=-0.5),
    "utilization_above_1": lambda rank, meta: rank.update(gpu_utilization=7.0),
    "loss_above_1": lambda rank, meta: rank.update(losses={**rank["losses"], "sync": 1.5}),
    "negative_step_times": lambda rank, meta: _scale_steps(rank, -1.0),
    "infinite_step_times": lambda rank, meta: _scale_steps(rank, float("inf")),
    "another_window": lambda rank, meta: meta.update(window=[1, 3]),
    "another_rank": lambda rank, meta: (meta.update(rank=5), rank.update(rank=5)),
    "more_steps": lambda rank, meta: _one_more_step(rank),
}
CONTRADICTIONS = ("another_window", "another_rank", "more_steps")


def damage(side: dict[str, Any], how: str, tmp_path: Path) -> None:
    """Damage the sidecar ``side`` (as written for its trace) in the way named ``how`` (a key of ``DAMAGE``)."""
    if how in CONTRADICTIONS:
        _other_traces_sidecar(side, tmp_path)
    DAMAGE[how](side["rank"], side["meta"])


def _other_traces_sidecar(side: dict[str, Any], tmp_path: Path) -> None:
    """``side`` becomes the sidecar of another trace (compute_bound), its name and size forged to match this one."""
    folder = tmp_path / "other" / "window-000004-000006"
    folder.mkdir(parents=True, exist_ok=True)
    other = folder / "rank0.pt.trace.json.gz"
    shutil.copy(fixture_trace("compute_bound"), other)
    forged = write_sidecar(other, dict(side["meta"]))
    side.update({k: v for k, v in forged.items() if k not in ("trace", "trace_bytes")})

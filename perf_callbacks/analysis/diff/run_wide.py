"""``diff`` over whole runs: the run-wide step records of both sides, in the unit that matters, with the call.

``compare_runs(base, new)`` takes each side's :class:`~perf_callbacks.analysis.diff.steps.StepRecord` (one per rank),
leaves out warm-up, profiled and compiling steps, joins the ranks step by step (the slowest rank's time, the samples of
all ranks) and estimates the effect (``analysis/judge/effect.py``) in the primary unit:

- ``wall time per sample`` (``wall time per step`` without sample counts) when the share of the wall time set aside
  (checkpoints, validation, logging, compilation) differs by more than the threshold: the wall clock is what a
  removed checkpoint saves; blocks give their mean there, since a rare long step is part of what the run pays;
- else ``time per sample`` when the batch (samples per step) differs;
- else ``step time``.

Step time stays as a secondary line, with time per sample when the primary is the wall clock and the batch differs.

Example:
    >>> from perf_callbacks.analysis.diff.steps import StepRecord
    >>> def run(ms, batch, aside=0.0):
    ...     n = 200
    ...     return [StepRecord(0, list(range(n)), [ms / 1e3 * (1 + i % 2) for i in range(n)], [batch] * n, [0.0] * n,
    ...                        [aside] * n, [0.0] * n)]
    >>> d = compare_runs(run(10, 1), run(12, 64))
    >>> d["unit"], d["call"], round(d["effect"], 2)
    ('time per sample', 'improvement', -0.98)
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from perf_callbacks.analysis.diff.machine import machine_differences, withholds
from perf_callbacks.analysis.diff.steps import StepRecord, compared_steps
from perf_callbacks.analysis.judge.effect import CONFIDENCE, THRESHOLD, Effect, estimate

MIN_COMPARED = 10
"""Fewer comparable steps on a side than this: ``diff`` compares the windows instead."""
UNITS = {"step time": "ms/step", "time per sample": "ms/sample", "wall time per sample": "ms/sample",
         "wall time per step": "ms/step"}


class TooFewSteps(ValueError):
    """A side's step record holds fewer than ``MIN_COMPARED`` comparable steps."""


def compare_runs(base: list[StepRecord], new: list[StepRecord], threshold: float = THRESHOLD) -> dict[str, Any]:
    """The run-wide comparison: the ``diff --json`` object.

    Its keys: ``unit``, ``effect``, ``ci_low``, ``ci_high``, ``threshold``, ``call``, ``steps_to_decide``,
    ``machine_differs``, then the figures behind them.

    Raises:
        TooFewSteps: when a side has fewer than ``MIN_COMPARED`` steps to compare.
    """
    a, b = _joined(base), _joined(new)
    for side, name in ((a, "base"), (b, "new")):
        if len(side["time"]) < MIN_COMPARED:
            raise TooFewSteps(f"the {name} run's step record holds {len(side['time'])} comparable steps (the others "
                              "warm-up, profiled or compiling), fewer than " + str(MIN_COMPARED))
    batch_a, batch_b = _batch(a), _batch(b)
    per_sample = batch_a is not None and batch_b is not None
    aside_moved = abs(_aside_share(a) - _aside_share(b)) > threshold
    unit = ("wall time per sample" if per_sample else "wall time per step") if aside_moved else \
        "time per sample" if per_sample and batch_a != batch_b else "step time"
    primary = _effect(a, b, unit, threshold)
    differences = machine_differences(base[0].meta, new[0].meta, batch_a, batch_b)
    call = primary.call
    if withholds(differences) and call in ("improvement", "regression"):
        call = "undecided"  # the machine's load moved: the change cannot be told from it
    secondary = [u for u in ("step time", "time per sample") if u != unit and
                 (u == "step time" or (per_sample and batch_a != batch_b))]
    return {
        "unit": unit, "effect": primary.effect, "ci_low": primary.ci_low, "ci_high": primary.ci_high,
        "threshold": threshold, "call": call, "steps_to_decide": primary.steps_to_decide if call == primary.call
        else None, "machine_differs": bool(differences), "machine": differences, "confidence": CONFIDENCE,
        "withheld": call != primary.call, "block_steps": primary.block,
        "base": _side(base, a, unit), "new": _side(new, b, unit),
        "secondary": [{"unit": u, **_brief(_effect(a, b, u, threshold))} for u in secondary],
    }


def _effect(a: dict[str, list[float]], b: dict[str, list[float]], unit: str, threshold: float) -> Effect:
    """The effect in ``unit``.

    On the wall clock, blocks of at least two set-aside steps' spacing (their mean then holds such steps in their
    share, not one block in two or none).
    """
    if not unit.startswith("wall"):
        return estimate(_costs(a, unit), _costs(b, unit), threshold)
    spacing = max(len(s["aside"]) / max(1, sum(x > 0 for x in s["aside"])) for s in (a, b))
    return estimate(_costs(a, unit), _costs(b, unit), threshold, typical=False, min_block=math.ceil(2 * spacing))


def _costs(side: dict[str, list[float]], unit: str) -> list[float]:
    """Each step's cost in ``unit`` (seconds); steps of zero cost are left out (a clock too coarse to see them)."""
    time, aside, samples = side["time"], side["aside"], side["samples"]
    wall = unit.startswith("wall")
    per = unit.endswith("sample")
    costs = [(t + (x if wall else 0.0)) / (n if per else 1.0) for t, x, n in zip(time, aside, samples, strict=True)]
    return [c for c in costs if c > 0]


def _joined(records: list[StepRecord]) -> dict[str, list[float]]:
    """The compared steps of all ranks, joined by step: the slowest rank's time and set-aside time, all samples."""
    ranks = [compared_steps(r) for r in records]
    common = set(ranks[0].step).intersection(*(r.step for r in ranks[1:])) if ranks else set()
    rows: dict[float, list[float]] = {}
    for r in ranks:
        for s, t, n, x in zip(r.step, r.time_s, r.samples, r.aside_s, strict=True):
            if s in common:
                row = rows.setdefault(s, [0.0, 0.0, 0.0])
                row[0], row[1], row[2] = max(row[0], t), row[1] + n, max(row[2], x)
    ordered = [rows[s] for s in sorted(rows)]
    return {"time": [r[0] for r in ordered], "samples": [r[1] for r in ordered], "aside": [r[2] for r in ordered],
            "steps": [float(len(r.time_s)) for r in records]}


def _batch(side: dict[str, list[float]]) -> float | None:
    """The median samples per step; None when some step's samples are unknown."""
    samples = side["samples"]
    return float(statistics.median(samples)) if samples and min(samples) > 0 else None


def _aside_share(side: dict[str, list[float]]) -> float:
    wall = sum(side["time"]) + sum(side["aside"])
    return sum(side["aside"]) / wall if wall > 0 else 0.0


def _side(records: list[StepRecord], side: dict[str, list[float]], unit: str) -> dict[str, Any]:
    costs = _costs(side, unit)
    return {"path": records[0].path, "ranks": [r.rank for r in records], "steps": int(sum(side["steps"])),
            "compared_steps": len(side["time"]), "batch": _batch(side), "aside_share": _aside_share(side),
            "typical_ms": statistics.median(costs) * 1e3 if costs else None,
            "mean_ms": statistics.fmean(costs) * 1e3 if costs else None,
            "step_ms": statistics.median(side["time"]) * 1e3, "cpu_contention": records[0].meta.get("cpu_contention")}


def _brief(e: Effect) -> dict[str, Any]:
    return {"effect": e.effect, "ci_low": e.ci_low, "ci_high": e.ci_high, "call": e.call,
            "steps_to_decide": e.steps_to_decide}

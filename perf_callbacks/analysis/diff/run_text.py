"""The readable run-wide comparison (``perf-callbacks diff`` without ``--windows``): the machine first, then the call.

Example:
    >>> from perf_callbacks.analysis.diff.run_wide import compare_runs
    >>> from perf_callbacks.analysis.diff.steps import StepRecord
    >>> def run(ms):
    ...     return [StepRecord(0, list(range(200)), [ms / 1e3 * (1 + i % 2) for i in range(200)], [8.0] * 200,
    ...                        [0.0] * 200, [0.0] * 200, [0.0] * 200, path="run/steps-rank0.f32")]
    >>> print(format_run_diff(compare_runs(run(10), run(5))).splitlines()[3])
    step time -50.0% (95% interval -50.0% to -50.0%): improvement, beyond the 2% threshold
"""

from __future__ import annotations

import math
from typing import Any

from perf_callbacks.analysis.diff.run_wide import UNITS

VERDICTS = {
    "improvement": "improvement, beyond the {t} threshold",
    "regression": "regression, beyond the {t} threshold",
    "no change": "no change: the interval is within +-{t}",
    "undecided": "undecided",
}


def format_run_diff(d: dict[str, Any]) -> str:
    """Render what :func:`~perf_callbacks.analysis.diff.run_wide.compare_runs` returned."""
    lines = ["perf-callbacks diff: whole runs (every step but warm-up, profiled and compiling steps)",
             f"  base: {_side(d['base'])}", f"  new:  {_side(d['new'])}"]
    if d["machine"]:
        lines.append("the runs differ besides the change: " + "; ".join(x["text"] for x in d["machine"]))
    lines.append(headline(d["unit"], d, d["threshold"]))
    if d["withheld"]:
        lines.append("  no call: the CPU contention moved, and it moves step time by itself; compare runs under "
                     "the same load")
    lines.append(_figures(d))
    lines += ["  " + headline(s["unit"], s, d["threshold"]) for s in d["secondary"]]
    lines.append("  --windows compares the latest profiled windows instead: causes, ops and memory")
    return "\n".join(lines) + "\n"


def headline(unit: str, e: dict[str, Any], threshold: float) -> str:
    """``UNIT +x% (95% interval a to b): CALL``; an undecided call says how many steps a run would decide."""
    t = f"{threshold:.0%}" if threshold * 100 == round(threshold * 100) else f"{threshold:.1%}"
    call = VERDICTS[e["call"]].format(t=t)
    if e["call"] == "undecided" and e.get("steps_to_decide"):
        call += f": about {e['steps_to_decide']} compared steps a run would decide"
    return f"{unit} {_pct(e['effect'])} ({_interval(e)}): {call}"


def _interval(e: dict[str, Any]) -> str:
    if not math.isfinite(e["ci_high"]):
        return "too few steps for an interval"
    return f"95% interval {_pct(e['ci_low'])} to {_pct(e['ci_high'])}"


def _figures(d: dict[str, Any]) -> str:
    a, b, unit = d["base"], d["new"], UNITS[d["unit"]]
    which = "mean" if d["unit"].startswith("wall") else "median"
    out = f"  {which} {_ms(a, which)} -> {_ms(b, which)} {unit}"
    if d["unit"].startswith("wall"):
        out += (f"; time set aside (checkpoints, validation, compilation) {a['aside_share']:.0%} -> "
                f"{b['aside_share']:.0%} of the wall time")
    return out


def _ms(side: dict[str, Any], which: str) -> str:
    x = side["mean_ms" if which == "mean" else "typical_ms"]
    return "n/a" if x is None else f"{x:.3g}"


def _side(side: dict[str, Any]) -> str:
    ranks = side["ranks"]
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
    return f"{side['path']} ({side['compared_steps']} of {side['steps']} steps compared, {who})"


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%" if math.isfinite(x) else "n/a"

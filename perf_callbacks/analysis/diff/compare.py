"""``compare``: what changed between two analysed windows, by how much, whether it is beyond the noise, and why.

``compare(base, new)`` is a pure function of two ``AnalysisResult`` objects; ``diff_windows.diff_paths`` picks the
windows of two paths, analyses them (in parallel when the traces are large) and calls it.

Example:
    >>> from perf_callbacks.analysis.results.result import AnalysisResult, RankResult, StepResult
    >>> def run(ms):
    ...     steps = [StepResult(i, ms + i % 3 * 0.1, {"compute": ms}) for i in range(8)]
    ...     rank = RankResult(0, "t", 1.0, None, None, ms, 0.0, {}, steps, {}, {}, [], [], None, [], {},
    ...                       None)
    ...     return AnalysisResult("t", "compute_bound", None, 0.0, ms, [], [], [rank])
    >>> d = compare(run(10.0), run(13.0))
    >>> d.regression, d.summary
    (True, 'step time +29.7% (10.1 -> 13.1 ms/step, significant regression): compute +3.0 ms/step')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perf_callbacks.analysis.diff.gains import estimate_check
from perf_callbacks.analysis.diff.measures import compare_measures
from perf_callbacks.analysis.diff.memory import compare_categories
from perf_callbacks.analysis.diff.mfu import mfu_delta
from perf_callbacks.analysis.judge.noise import Change, compare_samples
from perf_callbacks.analysis.results.parts import flat
from perf_callbacks.analysis.results.recommendation import Recommendation
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult
from perf_callbacks.analysis.results.verdicts import Verdict
from perf_callbacks.analysis.trace.timeline import CAUSES

_UNCHANGED = 0.05


@dataclass
class DiffResult:
    """What ``compare`` returns; ``to_dict`` is the ``perf-callbacks diff --json`` object.

    Args:
        base: the base side: ``path`` given, ``window`` analysed, ``complete``, ``n_steps``, ``ranks``.
        new: the same for the new side.
        step_time_ms: ``{base, new, change, significant}`` (medians), plus ``change_pct``, ``p_value``, ``spread_ms``
            and ``noise`` (why it is or is not significant).
        gpu_utilization: ``{base, new, change}``.
        data_wait_fraction: ``{base, new, change}``.
        peak_memory_bytes: ``{base, new, change}``.
        causes: cause -> ``{base, new, change}`` in ms per step (mean over steps and ranks).
        ops: ``matched``, ``added`` and ``removed`` ops (matched by name and device), per-step deltas first.
        verdict: ``{base, new}``.
        regression: step time is significantly slower.
        summary: one line, e.g. ``step time +38% (12.1 -> 16.7 ms/step, significant regression): data wait ...``.
        outcome: ``regression``, ``improvement`` or ``within noise``.
        recommendations: ``added`` (new ones, listed first by the text) and ``removed``, compared without numbers.
        contributors: the changes that explain the delta, largest first: causes, then ops.
        ranks: per-rank step-time deltas.
        stragglers: ``{base, new, changed}``.
        mfu: ``{base, new, change}`` of the model FLOPs utilization (None where a side has none).
        mfu_gap: gap part (``input`` ... ``other``, ``below_peak``) -> ``{base, new, change}``, fractions of peak.
        measures: collective busbw and exposed time per step, copy rates, launch latency and the memory peak on
            each side (``diff_measures.compare_measures``).
        memory_categories: category (``parameters`` ... ``peak``) -> ``{base, new, change}`` in bytes, and
            ``changed``: the categories that moved by more than 10% of the base peak (``diff_memory``); {} without.
        estimates: the base's top recommendations with an estimated gain, each against the step time the change
            delivered: ``{cause, text, estimated_gain_ms, estimated_gain_fraction, basis, delivered_ms,
            delivered_fraction, delivered_share, noise_ms, cause_change_ms, outcome}`` (``diff_gains``).
    """

    base: dict[str, Any]
    new: dict[str, Any]
    step_time_ms: dict[str, Any]
    gpu_utilization: dict[str, Any]
    data_wait_fraction: dict[str, Any]
    peak_memory_bytes: dict[str, Any]
    causes: dict[str, dict[str, float]]
    ops: dict[str, list[dict[str, Any]]]
    verdict: dict[str, Verdict]
    regression: bool
    summary: str
    outcome: str = "within noise"
    recommendations: dict[str, list[str]] = field(default_factory=dict)
    contributors: list[dict[str, Any]] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    stragglers: dict[str, Any] = field(default_factory=dict)
    mfu: dict[str, Any] = field(default_factory=dict)
    mfu_gap: dict[str, dict[str, Any]] = field(default_factory=dict)
    measures: dict[str, Any] = field(default_factory=dict)
    memory_categories: dict[str, Any] = field(default_factory=dict)
    estimates: list[dict[str, Any]] = field(default_factory=list)
    base_result: AnalysisResult | None = field(default=None, repr=False)
    new_result: AnalysisResult | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready object (the two analysis results are left out)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("base_result", "new_result")}


def compare(base: AnalysisResult, new: AnalysisResult) -> DiffResult:
    """Compare two analysed windows: step time with its noise, utilization, causes, ops, verdict, ranks.

    Args:
        base: the reference window (before the change).
        new: the window to judge (after the change).

    Raises:
        ValueError: when either side has no ProfilerStep span, so no step time to compare.
    """
    step = compare_samples(_step_times(base), _step_times(new))
    causes = {c: _delta(v[0], v[1]) for c, v in _causes(base, new).items()}
    ops = _ops(base, new)
    outcome = "within noise" if not step.significant else "regression" if step.change > 0 else "improvement"
    contributors = _contributors(causes, ops)
    mfu, gap = mfu_delta(vars(base.efficiency), vars(new.efficiency))
    result = DiffResult(estimates=estimate_check(base, step, causes),
        base=_side(base), new=_side(new), step_time_ms=_step_dict(step),
        gpu_utilization=_delta(base.gpu_utilization, new.gpu_utilization),
        data_wait_fraction=_delta(base.data_wait_fraction, new.data_wait_fraction),
        peak_memory_bytes=_delta(base.memory.peak_bytes, new.memory.peak_bytes),
        causes=causes, ops=ops, verdict={"base": base.verdict, "new": new.verdict},
        regression=outcome == "regression", summary="", outcome=outcome,
        recommendations=_recommendations(base.recommendations, new.recommendations),
        contributors=contributors, ranks=_ranks(base.ranks, new.ranks),
        stragglers={"base": base.stragglers, "new": new.stragglers, "changed": base.stragglers != new.stragglers},
        base_result=base, new_result=new, mfu=mfu, mfu_gap=gap,
        measures=compare_measures(_figures(base), _figures(new), sum(len(x.steps) for x in base.ranks),
                                  sum(len(x.steps) for x in new.ranks)),
        memory_categories=compare_categories(base.memory.categories, new.memory.categories),
    )
    result.summary = summarize(result)
    return result


def _figures(r: AnalysisResult) -> dict[str, Any]:
    """The window's measures and memory under their JSON keys (``communication``, ``memory_peak``...)."""
    return {**flat(r.measures), **flat(r.memory)}


def summarize(d: DiffResult) -> str:
    """One line: the step-time change and its noise verdict, then the causes and the op behind it.

    A second cause is named when its change is at least half that of the first.
    """
    st = d.step_time_ms
    pct = "n/a" if st["change_pct"] is None else f"{st['change_pct']:+.1f}%"
    need = st.get("steps_to_decide")
    judged = f"significant {d.outcome}" if st["significant"] else \
        f"within noise; {need} steps a window could decide" if need else "within noise"
    head = f"step time {pct} ({st['base']:.1f} -> {st['new']:.1f} ms/step, {judged})"
    parts = []
    causes = [c for c in d.contributors if c["kind"] == "cause" and abs(c["change_ms"]) >= 0.01]
    for i, c in enumerate(causes[:2]):
        if i and abs(c["change_ms"]) < abs(causes[0]["change_ms"]) / 2:
            break
        changed = i == 0 and d.verdict["base"] != d.verdict["new"]
        now = f" ({d.verdict['new'].replace('_', '-')} now)" if changed else ""
        parts.append(f"{c['name']} {c['change_ms']:+.1f} ms/step{now}")  # the cause's one name (JSON's key)
    op = _op_phrase(d)
    if op:
        parts.append(op)
    return head + (": " + ", ".join(parts) if parts else "")


def _op_phrase(d: DiffResult) -> str | None:
    matched = d.ops.get("matched", [])
    top = next((c for c in d.contributors if c["kind"] == "op"), None)
    if top is not None:
        row = next((m for m in matched if m["name"] == top["name"]), None)
        base_ms = row["base"]["per_step_ms"] if row else 0.0
        if abs(top["change_ms"]) > max(_UNCHANGED * base_ms, 0.01):
            return f"{top['name']} {top['change_ms']:+.2f} ms/step"
    heaviest = max(matched, key=lambda m: m["base"]["per_step_ms"], default=None)
    return f"{heaviest['name']} unchanged" if heaviest else None


def _step_times(r: AnalysisResult) -> list[float]:
    times = [s.time_ms for rank in r.ranks for s in rank.steps]
    if not times:
        raise ValueError(f"no ProfilerStep spans in {r.path}: nothing to compare step times with")
    return times


def _step_dict(c: Change) -> dict[str, Any]:
    return {"base": c.base, "new": c.new, "change": c.change, "significant": c.significant,
            "change_pct": c.change_pct, "p_value": c.p_value, "spread_ms": {"base": c.spread_base, "new": c.spread_new},
            "noise": c.reason, "steps_to_decide": c.steps_to_decide}


def _delta(a: float | None, b: float | None) -> dict[str, Any]:
    return {"base": a, "new": b, "change": None if a is None or b is None else b - a}


def _side(r: AnalysisResult) -> dict[str, Any]:
    return {"path": r.path, "window": r.path, "n_steps": len({s.step for x in r.ranks for s in x.steps}),
            "ranks": [x.rank for x in r.ranks]}


def causes_per_step(r: AnalysisResult) -> dict[str, float]:
    """Mean milliseconds per step of each timeline cause, averaged over the ranks that have steps.

    Each step's causes within its own time (:meth:`StepResult.within_step`): the last step's device tail, the work
    still queued when its host span ended, is not a step's time.
    """
    ranks = [x for x in r.ranks if x.steps]
    out = dict.fromkeys(CAUSES, 0.0)
    for x in ranks:
        for s in x.steps:
            for c, ms in s.within_step().items():
                out[c] = out.get(c, 0.0) + ms / len(x.steps) / len(ranks)
    return out


def _causes(base: AnalysisResult, new: AnalysisResult) -> dict[str, tuple[float, float]]:
    a, b = causes_per_step(base), causes_per_step(new)
    return {c: (a.get(c, 0.0), b.get(c, 0.0)) for c in dict.fromkeys([*a, *b])}


def _ops(base: AnalysisResult, new: AnalysisResult) -> dict[str, list[dict[str, Any]]]:
    """Ops matched by name and device, with count, total, per-call and per-step time on each side."""
    a, b = _op_table(base), _op_table(new)
    zero = {"count": 0, "total_ms": 0.0, "per_call_ms": 0.0, "per_step_ms": 0.0}
    matched = [{"name": k[0], "device": k[1], "base": a[k], "new": b[k],
                "change_ms": b[k]["per_step_ms"] - a[k]["per_step_ms"]} for k in a if k in b]
    added = [{"name": k[0], "device": k[1], "base": zero, "new": v, "change_ms": v["per_step_ms"]}
             for k, v in b.items() if k not in a]
    removed = [{"name": k[0], "device": k[1], "base": v, "new": zero, "change_ms": -v["per_step_ms"]}
               for k, v in a.items() if k not in b]
    for rows in (matched, added, removed):
        rows.sort(key=lambda o: -abs(o["change_ms"]))
    return {"matched": matched, "added": added, "removed": removed}


def _op_table(r: AnalysisResult) -> dict[tuple[str, str], dict[str, Any]]:
    steps = sum(len(x.steps) for x in r.ranks) or 1
    out = {}
    for op in r.top_ops:
        total = op["self_time_us"] / 1e3
        out[(op["name"], op["device"])] = {"count": op["count"], "total_ms": total,
                                           "per_call_ms": total / op["count"] if op["count"] else 0.0,
                                           "per_step_ms": total / steps}
    return out


def _contributors(causes: dict[str, dict[str, Any]], ops: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Causes by size of their per-step change, then ops the same way (both in ms per step)."""
    by_cause = sorted(({"kind": "cause", "name": c, "change_ms": v["change"]} for c, v in causes.items()),
                      key=lambda x: -abs(x["change_ms"]))
    rows = ops["matched"] + ops["added"] + ops["removed"]
    by_op = sorted(({"kind": "op", "name": o["name"], "change_ms": o["change_ms"]} for o in rows),
                   key=lambda x: -abs(x["change_ms"]))
    return by_cause + by_op


def _recommendations(base: Sequence[str], new: Sequence[str]) -> dict[str, list[str]]:
    """The advice added and removed, matched by the cause each addresses (its ``cause`` field, not its words).

    'data wait 41%: raise num_workers to 4' and 'data wait 43%: ... to 8' are one advice, measured twice.
    """
    old, now = [Recommendation.of(t) for t in base], [Recommendation.of(t) for t in new]
    a, b = {r.cause for r in old}, {r.cause for r in now}
    return {"added": [str(r) for r in now if r.cause not in a], "removed": [str(r) for r in old if r.cause not in b]}


def _ranks(base: list[RankResult], new: list[RankResult]) -> list[dict[str, Any]]:
    """Per-rank median step time on each side and whether that rank's change is beyond its own noise."""
    b = {r.rank: r for r in new}
    out = []
    for a in base:
        other = b.get(a.rank)
        if other is None or not a.steps or not other.steps:
            continue
        c = compare_samples([s.time_ms for s in a.steps], [s.time_ms for s in other.steps])
        out.append({"rank": a.rank, "base": c.base, "new": c.new, "change": c.change, "significant": c.significant,
                    "verdict": {"base": a.verdict, "new": other.verdict}})
    return out


"""``diff``'s check of the estimates: the gain the base's top recommendations estimated, against what was delivered.

For each of the base's first ``TOP`` recommendations with an estimated gain
(:mod:`perf_callbacks.analysis.judge.gains`): the delivered gain is the fall of the median step time, base minus new
(positive when faster), judged against the noise as ``diff`` judges the step time
(:func:`perf_callbacks.analysis.judge.noise.compare_samples`). The outcome is

- ``within noise``: the step time did not move beyond the noise, so nothing was delivered that the windows can show;
- ``slower``: the step time rose beyond the noise;
- ``within the estimate``: faster, by no more than the estimate plus the noise band, as an upper bound allows. The band
  is the two sides' per-step spreads added: the delivered gain is the difference of two medians, each as uncertain as
  its side's spread (on a shared machine the rest of the step drifts between two runs by about that much);
- ``beyond the estimate``: faster by more than the estimate and the noise band: more than this recommendation's cause
  went (several changes at once, or other work), or the estimate was no bound;
- ``cause did not move``: the step time moved beyond the noise, but the recommendation's own cause fell by less than
  ``CAUSE_MOVED`` of the estimate (where its change is known): it was not this advice delivering: no share of the
  estimate is given, and ``elsewhere`` names the cause that moved most instead (where the time went).

``cause_change_ms`` is the change of the recommendation's own cause in ms per step (``diff``'s time by cause), where
the cause is one of the timeline's: it says whether the delivered time came off that cause.

Example:
    >>> from perf_callbacks.analysis.judge.noise import compare_samples
    >>> from perf_callbacks.analysis.results.recommendation import Recommendation
    >>> step = compare_samples([50.0, 50.5, 49.8, 50.2, 50.1], [36.0, 36.2, 35.9, 36.1, 36.3])
    >>> row = check_one(Recommendation("remove .item()", "sync", 14.0, 0.28, "upper bound"), step, -13.5)
    >>> row["outcome"], round(row["delivered_ms"], 1), round(row["delivered_share"], 2)
    ('within the estimate', 14.0, 1.0)
"""

from __future__ import annotations

from typing import Any

from perf_callbacks.analysis.judge.gains import gain_label
from perf_callbacks.analysis.judge.noise import Change
from perf_callbacks.analysis.results.recommendation import Recommendation
from perf_callbacks.analysis.results.result import AnalysisResult

TOP = 3
"""How many of the base's recommendations with a gain are checked."""
CAUSE_MOVED = 0.25
"""A recommendation's cause that fell by less than this share of its estimate did not move."""


def estimate_check(base: AnalysisResult, step: Change, causes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The base's first ``TOP`` recommendations with an estimated gain, each against the delivered step-time change.

    Args:
        base: the base side's analysis.
        step: ``diff``'s comparison of the two sides' step times.
        causes: ``diff``'s time by cause, cause -> ``{base, new, change}`` in ms per step.
    """
    recs = [r for r in map(Recommendation.of, base.recommendations) if r.estimated_gain_ms is not None][:TOP]
    rows = [check_one(r, step, (causes.get(r.cause) or {}).get("change")) for r in recs]
    for row in rows:
        if row["outcome"] == "cause did not move":
            moved = [(c, v["change"]) for c, v in causes.items() if c != row["cause"] and v.get("change")]
            top = max(moved, key=lambda cv: abs(cv[1]), default=None)
            row["elsewhere"] = None if top is None else {"cause": top[0], "change_ms": top[1]}
    return rows


def check_one(rec: Recommendation, step: Change, cause_change_ms: float | None) -> dict[str, Any]:
    """One recommendation's estimate against the change: ``{cause, text, estimated_gain_ms, ..., outcome}``."""
    estimate = rec.estimated_gain_ms or 0.0
    delivered = -step.change
    band = step.spread_base + step.spread_new
    if not step.significant:
        outcome = "within noise"
    elif cause_change_ms is not None and estimate > 0 and -cause_change_ms < CAUSE_MOVED * estimate:
        outcome = "cause did not move"
    elif delivered < 0:
        outcome = "slower"
    elif delivered <= estimate + band:
        outcome = "within the estimate"
    else:
        outcome = "beyond the estimate"
    return {**rec.to_dict(), "delivered_ms": delivered,
            "delivered_fraction": delivered / step.base if step.base else None,
            "delivered_share": delivered / estimate if estimate else None, "noise_ms": band,
            "cause_change_ms": cause_change_ms, "outcome": outcome}


def estimate_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The diff text's lines: each estimate, what was delivered, and the outcome."""
    if not rows:
        return []
    out = ["the base's estimates against the change (delivered: the fall of the median step time):"]
    for i, row in enumerate(rows, 1):
        pct = "" if row["delivered_fraction"] is None else f", {-row['delivered_fraction']:+.0%}"
        share = f", {row['delivered_share']:.0%} of the estimate" if row["delivered_share"] is not None and \
            row["outcome"] in ("within the estimate", "beyond the estimate") else ""
        cause = "" if row["cause_change_ms"] is None else f"; {row['cause']} {row['cause_change_ms']:+.1f} ms/step"
        if (where := row.get("elsewhere")) is not None:
            cause += f"; the time went to {where['cause']} {where['change_ms']:+.1f} ms/step"
        text = row["text"] if len(row["text"]) <= 70 else row["text"][:67] + "..."
        out.append(f"  {i}. {row['cause']} ({text}): estimated {gain_label(row)}; delivered "
                   f"{-row['delivered_ms']:+.1f} ms/step{pct} (noise band {row['noise_ms']:.2g} ms){cause}: "
                   f"{row['outcome']}{share}")
    return out

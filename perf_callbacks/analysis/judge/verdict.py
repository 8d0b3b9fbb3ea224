"""Verdicts and ranked recommendations: the cause of the largest removable loss, with its evidence and its fix."""

from __future__ import annotations

from dataclasses import dataclass

from perf_callbacks.analysis.judge.evidence import evidence_note, judged_losses
from perf_callbacks.analysis.judge.gains import loss_recommendation, rank_by_gain, table_gain, without_gain
from perf_callbacks.analysis.judge.load import loader_block, loader_evidence
from perf_callbacks.analysis.judge.recommend import (
    ADVICE,
    HOST_UNTRACED,
    backlog_note,
    compute_advice,
    host_untraced,
    memory_note,
    profiler_caveat,
)
from perf_callbacks.analysis.results.recommendation import pageable_copies
from perf_callbacks.analysis.results.result import RankResult
from perf_callbacks.analysis.results.verdicts import Verdict

__all__ = ["CLOSE", "HOST_UNTRACED", "MATERIAL", "THRESHOLD", "VERDICT_OF", "Margin", "host_untraced", "judge_rank",
           "lead_cause", "verdict_from", "verdict_margin", "window_verdict"]

THRESHOLD = 0.10
CLOSE = 0.03
MATERIAL = 0.05
"""A loss under the verdict's threshold gets its advice from this share of the window on: half the threshold."""
VERDICT_OF: dict[str, Verdict] = {
    "input": "input_bound",
    "host": "host_bound",
    "sync": "sync_bound",
    "copy": "copy_bound",
    "communication": "communication_bound",
    "other": "unexplained_idle",
    "cpu_contention": "cpu_contention",
}
_NO_COMPUTE_GAIN = "no gain estimated: without the FLOPs of a step (MFU) how far the kernels run from the device's " \
                   "peak is not measured"
_NO_MEMORY_GAIN = "no gain estimated: what a larger batch or less memory would change in step time is not measured"
_LABEL = {"other": "unexplained idle", "cpu_contention": "waiting for a CPU"}


@dataclass(frozen=True)
class Margin:
    """How clear a verdict is.

    Args:
        margin: the largest loss minus ``THRESHOLD`` (negative when under it), None without losses.
        runner_up: the verdict the next candidate would give (the next cause, or ``compute_bound``).
        note: ``input 10.4%, close to the 10% threshold`` when the call is within ``CLOSE`` of flipping, else "".
    """

    margin: float | None
    runner_up: Verdict | None
    note: str


def verdict_margin(losses: dict[str, float]) -> Margin:
    """Return how close ``verdict_from(losses)`` is to flipping: to the threshold, or to the next cause.

    Example:
        >>> verdict_margin({"input": 0.104, "host": 0.02}).note
        'input 10.4%, close to the 10% threshold'
        >>> verdict_margin({"input": 0.5, "host": 0.02}).note
        ''
    """
    ranked = sorted(losses.items(), key=lambda kv: -kv[1])
    if not ranked:
        return Margin(None, None, "")
    (cause, share), rest = ranked[0], ranked[1:]
    second = rest[0] if rest else ("", 0.0)
    margin = share - THRESHOLD
    if share < THRESHOLD:
        runner_up = VERDICT_OF[cause]
    else:
        runner_up = VERDICT_OF[second[0]] if second[0] and second[1] >= THRESHOLD else "compute_bound"
    note = ""
    if abs(margin) < CLOSE:
        note = f"{_label(cause)} {share:.1%}, close to the {THRESHOLD:.0%} threshold"
    elif share >= THRESHOLD and second[1] >= THRESHOLD and share - second[1] < CLOSE:
        note = f"{_label(cause)} {share:.1%}, close to {_label(second[0])} {second[1]:.1%}"
    return Margin(margin, runner_up, note)


def _label(cause: str) -> str:
    return _LABEL.get(cause, cause)


def verdict_from(losses: dict[str, float]) -> Verdict:
    """Return the verdict for losses given as fractions of the window: ``compute_bound`` unless one reaches 10%.

    Example:
        >>> verdict_from({"input": 0.6, "sync": 0.2})
        'input_bound'
        >>> verdict_from({"input": 0.05, "host": 0.02})
        'compute_bound'
    """
    cause, worst = max(losses.items(), key=lambda kv: kv[1], default=("", 0.0))
    return VERDICT_OF[cause] if worst >= THRESHOLD else "compute_bound"


def window_verdict(ranks: list[RankResult]) -> tuple[Verdict, Margin]:
    """The verdict of a window from the mean over its ranks of the losses their evidence supports, and its margin.

    The margin's note also says when the window's data wait reaches the threshold on too little evidence (one slow
    fetch, or a median step under 1 ms; see :mod:`perf_callbacks.analysis.judge.evidence`).
    """
    judged = [judged_losses(r) for r in ranks]
    keys = {k for losses in judged for k in losses}
    losses = {k: sum(j.get(k, 0.0) for j in judged) / len(judged) for k in keys} if judged else {}
    margin = verdict_margin(losses)
    note = "; ".join(n for n in (margin.note, evidence_note(ranks, THRESHOLD)) if n)
    return verdict_from(losses), Margin(margin.margin, margin.runner_up, note)


def lead_cause(verdict: Verdict) -> str:
    """The cause a verdict names (``sync`` for ``sync_bound``), ``compute`` for ``compute_bound``.

    Example:
        >>> lead_cause("sync_bound"), lead_cause("compute_bound")
        ('sync', 'compute')
    """
    return next((c for c, v in VERDICT_OF.items() if v == verdict), "compute")


def judge_rank(r: RankResult) -> None:
    """Set ``r.verdict`` and ``r.recommendations`` (largest gain first, the profiler caveat after the verdict's).

    Advice is given for the verdict's cause and for every other loss of at least ``MATERIAL``. The verdict, and which
    advice is given, rest on the losses the evidence supports
    (:func:`perf_callbacks.analysis.judge.evidence.judged_losses`); the advice quotes the window's figures, and each
    carries its gain (:mod:`perf_callbacks.analysis.judge.gains`). ``r.loader`` gets the loader block
    (:mod:`perf_callbacks.analysis.judge.load`).
    """
    judged = judged_losses(r)
    r.verdict = verdict_from(judged)
    ranked = sorted(((judged[c], c, ADVICE[c](r, share)) for c, share in r.losses.items()
                     if judged[c] >= MATERIAL or VERDICT_OF[c] == r.verdict), reverse=True)
    recs = [loss_recommendation(r, c, text) for _, c, text in ranked]
    e = loader_evidence(r, judged.get("input", 0.0)) if r.load else None  # as the advice's text (recommend.py)
    recs = [table_gain(x, e) if x.cause == "input" else x for x in recs]
    named = pageable_copies([k for k, _ in r.named_copies()])
    recs = [x.naming(named) if x.cause == "copy" else x for x in recs]
    if r.backlog_fraction >= 0.02:
        recs.append(without_gain(backlog_note(r), "backlog", "no gain: a note on work queued before the window"))
    if r.verdict == "compute_bound":
        recs.insert(0, without_gain(compute_advice(r), "compute", _NO_COMPUTE_GAIN))
    caveat = profiler_caveat(r)
    if caveat:
        recs.append(without_gain(caveat, "profiler", "no gain: a caveat on what the profiler inflated"))
    memory = memory_note(r)
    if memory:
        recs.append(without_gain(memory, "memory", _NO_MEMORY_GAIN))
    r.recommendations = rank_by_gain(recs, lead_cause(r.verdict))
    r.loader = loader_block(r, judged.get("input", 0.0), judged.get("input", 0.0) >= MATERIAL)

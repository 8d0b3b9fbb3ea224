"""What each recommendation would gain: milliseconds per step and a share of step time, from the loss it removes.

Every recommendation is a ``Recommendation`` (:mod:`perf_callbacks.analysis.results.recommendation`): its text (it is
the ``str``, so code that reads the text keeps working), the ``cause`` it addresses, ``estimated_gain_ms`` per step,
``estimated_gain_fraction`` of the step time and ``basis``: the measurement the gain comes from, and "upper bound"
where it is one. A gain is never invented: where no measurement backs one (the compute advice without a FLOP count, a
caveat, a note on memory), both figures are None and the basis says why.

The gain of a loss is the time that loss took in a step: the median over the window's steps of the milliseconds the
timeline put down to the cause in each step (``StepResult.causes_ms``), and its share of the median step time. Removing
the cause can save no more than that time (the device idle it explains, the exposed copy or collective): each is an
upper bound. Where the steps do not hold the cause (the CPU wait, a trace without device), the window's share of the
loss is used, times the median step time. The compute advice's gain is the MFU gap's busy-below-peak share (the time
the device was busy beyond what the counted FLOPs take at peak), and a straggler's the median of its lateness per step.

Example:
    >>> rec = Recommendation("remove .item()", "sync", 13.8, 0.294, "device idle after syncs per step: upper bound")
    >>> rec.startswith("remove"), gain_label(rec)
    (True, 'up to -29% step time (-13.8 ms/step)')
    >>> [r.cause for r in rank_by_gain([Recommendation("a", "other", 1.0, 0.02, ""),
    ...                                 Recommendation("b", "memory", None, None, "no gain: a note"),
    ...                                 Recommendation("c", "sync", 10.0, 0.2, "")], "other")]
    ['sync', 'other', 'memory']
"""

from __future__ import annotations

from statistics import median
from typing import Any

from perf_callbacks.analysis.judge.cluster import lateness_per_step
from perf_callbacks.analysis.judge.decide import LoaderEvidence, decide
from perf_callbacks.analysis.results.recommendation import Recommendation
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult

NOTES = ("profiler", "backlog", "memory")
"""Causes of recommendations that are notes on the window, not fixes: they follow the fixes (the profiler caveat
follows the recommendation it qualifies: the verdict's)."""

BASIS = {
    "input": ("the data wait per step: {what} waited for its batch",
              "upper bound: all of it, if loading were hidden behind the step"),
    "sync": ("the device idle after blocking calls per step", "upper bound: all of it, if no call blocked the host"),
    "host": ("the device idle waiting for the host to launch work per step",
             "upper bound: all of it, with fewer launches or less host time per launch"),
    "copy": ("the copy time not overlapped with compute per step", "upper bound: all of it, if every copy overlapped "
             "compute"),
    "communication": ("the collective time not overlapped with compute per step",
                      "upper bound: all of it, if every collective overlapped compute"),
    "other": ("the device idle no measured cause explains per step",
              "upper bound: all of it, if whatever held the device went"),
    "cpu_contention": ("the training thread's measured wait for a CPU (run-queue delay)",
                       "upper bound: all of it, if no other thread held its core"),
}
"""Per cause: the measurement its gain comes from, and what makes it an upper bound."""
_NO_STEPS = "the trace has no steps (ProfilerStep), so no per-step time: the share of the window is given"


def step_gain(r: RankResult, cause: str) -> tuple[float | None, float | None, str]:
    """``(ms per step, fraction of step time, basis)`` of removing ``cause``'s loss on rank ``r``."""
    steps = [s for s in r.steps if s.time_ms > 0]
    what = "the time the device idled while the step" if r.gpu_utilization is not None else "the time the step"
    measure, bound = BASIS.get(cause, ("the loss of this cause", "upper bound: all of it"))
    measure = measure.format(what=what)
    share = r.losses.get(cause, 0.0)
    if not steps:
        return None, share, f"{measure}; {_NO_STEPS}; {bound}"
    step_ms = median(s.time_ms for s in steps)
    if cause != "cpu_contention" and any(cause in s.causes_ms for s in steps):
        ms = median(s.causes_ms.get(cause, 0.0) for s in steps)
        how = f"median over {len(steps)} step{'s' if len(steps) != 1 else ''}"
    else:
        ms = share * step_ms
        how = "its share of the window times the median step time"
    ms = min(ms, step_ms)
    return ms, ms / step_ms, f"{measure} ({how}); {bound}"


def loss_recommendation(r: RankResult, cause: str, text: str) -> Recommendation:
    """The recommendation for ``cause``'s loss on ``r`` with its gain."""
    ms, fraction, basis = step_gain(r, cause)
    return Recommendation(text, cause, ms, fraction, basis)


def table_gain(rec: Recommendation, e: LoaderEvidence | None) -> Recommendation:
    """The loader advice with the gain its decision implies (:func:`perf_callbacks.analysis.judge.decide.decide`).

    More workers can bring the step down to its own work, or to a batch's fetch spread over the workers, whichever is
    longer: the gain is the step less that, an upper bound (the fetches overlap the step perfectly at best). Advice
    that adds no workers keeps the data wait's own gain.
    """
    d = decide(e) if e is not None else None
    if d is None or d.gain_ms is None or d.gain_fraction is None or e is None:
        return rec
    basis = f"from the measured figures: a batch takes {d.fetch_ms or 0.0:.1f} ms to fetch, a step's own work is " \
            f"{e.own_ms:.1f} ms of a {e.step_ms:.1f} ms step; with num_workers={d.workers} the step takes at least " \
            f"max(own work, fetch / {d.workers}) = {e.step_ms - d.gain_ms:.1f} ms; upper bound: fetches fully " \
            "overlapped with the step"
    return Recommendation(str(rec), rec.cause, d.gain_ms, d.gain_fraction, basis)


def without_gain(text: str, cause: str, why: str) -> Recommendation:
    """A recommendation no measurement gives a gain: ``why`` says so."""
    return Recommendation(text, cause, None, None, why)


def compute_gain(rec: Recommendation, mfu_gap: dict[str, float] | None, step_time_ms: float | None,
                 dtype: str = "") -> Recommendation:
    """The compute advice with the MFU gap's busy-below-peak share as its gain, when the window has an MFU."""
    below = (mfu_gap or {}).get("below_peak")
    if below is None or not step_time_ms:
        return rec
    peak = f"the {dtype} peak" if dtype else "the device's peak"
    basis = f"the MFU gap's busy-below-peak share: the device time beyond what the counted FLOPs take at {peak}; " \
            "upper bound: every kernel at peak, and work the FLOP count leaves out (element-wise ops, the optimizer) " \
            "gone"
    return Recommendation(str(rec), rec.cause, below * step_time_ms, below, basis)


def straggler_gain(ranks: list[RankResult], rank: int, text: str) -> Recommendation:
    """A straggler's recommendation with its median lateness per step as the gain (the others wait that long)."""
    late, per_step = lateness_per_step(ranks)
    steps = [r.step_time_ms for r in ranks if r.step_time_ms]
    if not per_step or not late.get(rank) or not steps:
        return without_gain(text, "straggler", "no gain estimated: its lateness is known per collective, not per step")
    ms, step_ms = median(late[rank]), median(steps)
    basis = f"rank {rank}'s lateness per step at the collectives (median over {len(late[rank])} steps), which the " \
            "other ranks wait; upper bound: all of it, if it kept pace"
    return Recommendation(text, "straggler", min(ms, step_ms), min(ms / step_ms, 1.0), basis)


def rank_by_gain(recs: list[Any], lead: str) -> list[Recommendation]:
    """The recommendations by gain, largest first; those without a gain keep their order after them, notes last.

    ``lead`` is the verdict's cause. Its recommendation leads even without a gain: that is the compute advice of a
    ``compute_bound`` window without an MFU, where the busy time it addresses exceeds every loss with a gain (each is
    under the verdict's threshold) but how much of it can go is not measured. The profiler caveat
    (``cause="profiler"``) follows the verdict's recommendation: it says how far that figure is inflated. Plain
    strings become recommendations without a gain.
    """
    items = [Recommendation.of(x) for x in recs]
    caveats = [x for x in items if x.cause == "profiler"]
    rest = [x for x in items if x.cause != "profiler"]
    first = [x for x in rest if x.cause == lead and x.estimated_gain_fraction is None][:1]
    gained = sorted((x for x in rest if x.estimated_gain_fraction is not None and x.cause not in NOTES),
                    key=lambda x: -(x.estimated_gain_fraction or 0.0))
    plain = [x for x in rest if x.estimated_gain_fraction is None and x.cause not in NOTES and x not in first]
    notes = [x for x in rest if x.cause in NOTES]
    out = first + gained + plain
    at = next((i + 1 for i, x in enumerate(out) if x.cause == lead), None)
    if at is None:
        return out + notes + caveats
    return out[:at] + caveats + out[at:] + notes


def window_gains(result: AnalysisResult, lead: str) -> list[Recommendation]:
    """The window's recommendations ranked by gain, the compute advice with its MFU gain where the window has one.

    ``lead`` is the cause of the window's verdict (:func:`perf_callbacks.analysis.judge.verdict.lead_cause`). With a
    straggler, the exposed collective time of the others is mostly their wait for it: the collectives' advice gains only
    what is left of it after the straggler's lateness (:func:`without_straggling`).
    """
    dtype = next((str(r.flops.get("dtype") or "") for r in result.ranks if r.flops), "")
    recs = []
    for x in map(Recommendation.of, result.recommendations):
        if x.cause == "compute":
            x = compute_gain(x, result.efficiency.mfu_gap, result.step_time_ms, dtype)
        elif x.cause == "communication" and result.stragglers:
            x = without_straggling(x, result.ranks, result.stragglers)
        recs.append(x)
    hint = result.measures.precision
    if hint and hint.get("text") and not any(x.cause == "precision" for x in recs):
        recs.append(Recommendation(str(hint["text"]), "precision", hint.get("estimated_gain_ms"),
                                   hint.get("estimated_gain_fraction"), str(hint.get("basis") or "")))
    return rank_by_gain(recs, lead)


def without_straggling(rec: Recommendation, ranks: list[RankResult], slow: list[int]) -> Recommendation:
    """The collectives' recommendation less the stragglers' lateness per step, which only the straggler can remove."""
    late, per_step = lateness_per_step(ranks)
    if rec.estimated_gain_ms is None or rec.estimated_gain_fraction is None or not per_step:
        return rec
    wait = max((median(late[rk]) for rk in slow if late.get(rk)), default=0.0)
    ms = max(rec.estimated_gain_ms - wait, 0.0)
    fraction = rec.estimated_gain_fraction * ms / rec.estimated_gain_ms if rec.estimated_gain_ms else 0.0
    basis = f"{rec.basis}; less the straggler's lateness ({wait:.1f} ms a step), which overlapping cannot hide"
    return Recommendation(str(rec), rec.cause, ms, fraction, basis)


def gain_label(rec: Any, per_step: bool = True) -> str:
    """``up to -26% step time (-12.3 ms/step)``, ``gain not estimated`` without a measured gain, ``note`` for a note.

    ``per_step=False`` leaves the milliseconds out (the console line).
    """
    rec = Recommendation.of(rec)
    if rec.estimated_gain_fraction is None:
        return "note" if rec.cause in NOTES else "gain not estimated"
    pct = rec.estimated_gain_fraction * 100
    share = f"-{pct:.0f}%" if pct >= 1 or pct == 0 else f"-{pct:.1f}%"
    upper = "up to " if "upper bound" in rec.basis else ""
    ms = f" ({-rec.estimated_gain_ms:.1f} ms/step)" if per_step and rec.estimated_gain_ms is not None else ""
    return f"{upper}{share} step time{ms}"

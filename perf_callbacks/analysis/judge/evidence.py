"""Whether the input loss is evidence enough for a verdict: the bar the live data-wait warning already sets.

The window's input loss is a sum over its steps, and one slow fetch (a 15 ms hiccup on a loaded machine) can make it
reach the 10% threshold in a window of fast steps. The verdict and the advice therefore use the input share of the
*median* step (the lower median, so that with two steps the smaller one counts), capped at the window's share. And, as
the live check does (``core/timing/stats.py``), a median step that waited under ``MIN_WAIT_MS`` counts for nothing:
below 1 ms a step, the "wait" is the loop's own work between batches, which more loader workers do not shorten. A trace
without ``ProfilerStep`` has no steps to take a median over: its window share stands.

With ``num_workers`` workers (our metadata), batches come in rounds: the workers start together and finish together,
so one step of each round waits for all of them and the others find their batch ready. The median is then taken
over rounds of consecutive steps (at least three rounds), not single steps.

Where the training thread fetched its batches itself (``num_workers=0``) and waited for a CPU (``cpu_contention``,
see :mod:`perf_callbacks.analysis.judge.load`), its fetches waited for a CPU as the rest of its work did: the input loss
is the share of the window it fetched on a CPU (the wait less that share of it), and the floor applies to that time. A
fetch that took 3 ms because the thread was descheduled two thirds of the time is a 1 ms fetch on a busy machine, not
a slow loader; the rest is the contention's, a loss of its own. With workers, the training thread is blocked, not
waiting for a CPU, while it waits for a batch: their own wait decides (``advice.loader_kind``).

Example:
    >>> from perf_callbacks.analysis.results.result import RankResult, StepResult
    >>> steps = [StepResult(n, 10.0, {"compute": 9.0, "input": 1.0}) for n in (1, 2)]
    >>> steps.append(StepResult(3, 24.0, {"compute": 9.0, "input": 15.0}))  # one 15 ms hiccup
    >>> r = RankResult(0, "t", 44.0, None, None, 14.0, 0.39, {"input": 17 / 44}, steps, {}, {}, [], [],
    ...                None, [], {}, None)
    >>> round(input_evidence(r).share, 2), input_evidence(r).median_wait_ms
    (0.1, 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median, median_low

from perf_callbacks.analysis.judge.load import CAUSE, fetch_parts, in_rounds, judged_contention, thread_wait
from perf_callbacks.analysis.results.result import RankResult

MIN_WAIT_MS = 1.0
"""The live check's floor (``core.stats.MIN_ACTIONABLE_WAIT_S``) in ms: a median step that waits less is no evidence."""


@dataclass(frozen=True)
class InputEvidence:
    """The input loss a verdict may rest on.

    Args:
        share: the share of the window the verdict and the advice use (0 under the floor).
        window_share: the window's input loss, a sum over its steps.
        median_wait_ms: the input time of the median step (None without steps).
        longest_wait_ms: the input time of the step that waited longest (None without steps).
        contention: the share of the median fetch the training thread waited for a CPU, in-process (0 when not
            measured, or with workers): :func:`perf_callbacks.analysis.judge.load.fetch_parts`, else its share of the
            window.
    """

    share: float
    window_share: float
    median_wait_ms: float | None = None
    longest_wait_ms: float | None = None
    contention: float = 0.0

    @property
    def own_wait_ms(self) -> float | None:
        """The median step's wait less its share of waiting for a CPU."""
        return None if self.median_wait_ms is None else self.median_wait_ms * (1.0 - self.contention)


def input_evidence(r: RankResult) -> InputEvidence:
    """The input loss of ``r`` that survives one outlier step, and the figures behind it."""
    window, contention = r.losses.get("input", 0.0), thread_wait(r.load) if _in_process(r) else 0.0
    steps = [s for s in r.steps if sum(s.causes_ms.values()) > 0]
    if not steps:
        return InputEvidence(window, window, contention=contention)
    rounds = in_rounds(steps, r.machine.get("num_workers") if r.machine else None)
    waits = [sum(s.causes_ms.get("input", 0.0) for s in g) / len(g) for g in rounds]
    shares = [sum(s.causes_ms.get("input", 0.0) for s in g) / sum(sum(s.causes_ms.values()) for s in g)
              for g in rounds]
    typical = median_low(waits)
    parts = fetch_parts(r.load, median(s.time_ms for s in steps), typical, r.gpu_utilization is not None) \
        if contention and typical > 0 else None
    if parts is not None:  # the fetch's own wait for a CPU: a fetch that slept waited for none while asleep
        contention = parts[2] / typical
    share = 0.0 if typical * (1.0 - contention) < MIN_WAIT_MS else min(window, median_low(shares)) * (1 - contention)
    return InputEvidence(share, window, typical, max(s.causes_ms.get("input", 0.0) for s in steps), contention)


def _in_process(r: RankResult) -> bool:
    """The training thread fetched its batches itself (``num_workers=0``): its wait for a CPU was in its fetches too."""
    workers = r.machine.get("num_workers") if r.machine else None
    return workers == 0 or workers is None and (r.data_loader or "").startswith("enumerate(DataLoader)#_SingleProcess")


def judged_losses(r: RankResult) -> dict[str, float]:
    """``r.losses`` with the input loss replaced by the share its evidence supports, a contention under its bar by 0.

    Contention does not erase the other causes: it is the part of each cause's time the thread waited for a CPU. Where
    the training thread loaded its batches itself (``num_workers=0``), the input loss is the part of its wait it did
    not spend waiting for a CPU (:func:`input_evidence`); both causes stand side by side, each with its fix, and the
    verdict names the larger.

    The bar is :data:`perf_callbacks.analysis.judge.load.BAR`.
    """
    judged = dict(r.losses)
    if "input" in judged:
        judged["input"] = input_evidence(r).share  # in-process: the part of the wait the thread fetched on a CPU
    if CAUSE in judged:
        judged[CAUSE] = judged_contention(judged[CAUSE])
    return judged


def evidence_note(ranks: list[RankResult], threshold: float) -> str:
    """Why a window whose data wait reaches ``threshold`` is not judged input-bound; empty when it is, or does not.

    Example:
        >>> from perf_callbacks.analysis.results.result import RankResult, StepResult
        >>> steps = [StepResult(n, 3.0, {"compute": 2.4, "input": 0.6}) for n in (1, 2, 3)]
        >>> r = RankResult(0, "t", 9.0, None, None, 3.0, 0.2, {"input": 0.2}, steps, {}, {}, [], [],
        ...                None, [], {}, None)
        >>> evidence_note([r], 0.10)  # doctest: +NORMALIZE_WHITESPACE
        "data wait 20.0% of the window, but the median step waited 0.6 ms: under 1 ms is the loop's own work
        between batches, not a slow loader"
    """
    found = [input_evidence(r) for r in ranks]
    window = sum(e.window_share for e in found) / len(found) if found else 0.0
    judged = sum(e.share for e in found) / len(found) if found else 0.0
    typical = [e.median_wait_ms for e in found if e.median_wait_ms is not None]
    if window < threshold or judged >= threshold or not typical:
        return ""
    lead = f"data wait {window:.1%} of the window, but "
    if median(typical) < MIN_WAIT_MS:
        return f"{lead}the median step waited {median(typical):.1f} ms: under {MIN_WAIT_MS:.0f} ms is the loop's own " \
               "work between batches, not a slow loader"
    own = [e.own_wait_ms for e in found if e.own_wait_ms is not None]
    busy = max(e.contention for e in found)
    if median(own) < MIN_WAIT_MS:
        return f"{lead}the training thread waited for a CPU {busy:.1%} of its fetches: the median step's " \
               f"{median(typical):.1f} ms wait is {median(own):.1f} ms of its own, a busy machine, not a slow loader"
    if busy >= threshold:
        return f"{lead}the training thread waited for a CPU {busy:.1%} of its fetches: it " \
               f"fetched on a CPU {judged:.1%} of it, a busy machine, not a slow loader"
    longest = max(e.longest_wait_ms or 0.0 for e in found)
    return f"{lead}{judged:.1%} in the median step: a few slow fetches (the longest {longest:.1f} ms), not a slow " \
           "loader"

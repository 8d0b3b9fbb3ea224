"""The window's one console line, as data: the verdict, the one number behind it, and the first advice in a few words.

Built from the analysis result (never from its rendered text), stored in the sidecar as ``console``, and printed by
the engine as ``perf-callbacks: steps 12-14 input_bound: data wait 31%; try num_workers=4: up to -30% step time ->
<window>/summary.txt`` (the gain of the verdict's recommendation, :mod:`perf_callbacks.analysis.judge.gains`).
The whole advice, with its evidence, is in ``summary.txt``; the line says only what to look at first, in at most
about ``MAX_CHARS`` characters before the path.

Example:
    >>> from perf_callbacks.analysis.results.result import RankResult
    >>> r = RankResult(rank=0, path="t", span_ms=10.0, gpu_utilization=0.4, kernel_busy_fraction=None,
    ...                step_time_ms=10.0, data_wait_fraction=0.0, losses={"sync": 0.45}, steps=[], copies_ms={},
    ...                comm_ms={}, top_ops=[], profiler_flags=[],
    ...                data_loader=None, collectives_ms=[], sync_calls_ms={"aten::item": 4.5},
    ...                launches_per_step=None, verdict="sync_bound")
    >>> rank_parts(r)
    {'verdict': 'sync_bound', 'figure': 'device idle after syncs 45%', 'action': 'remove aten::item from the step'}
"""

from __future__ import annotations

from perf_callbacks.analysis.judge.advice import suggest_num_workers
from perf_callbacks.analysis.judge.decide import decide
from perf_callbacks.analysis.judge.evidence import input_evidence
from perf_callbacks.analysis.judge.gains import gain_label
from perf_callbacks.analysis.judge.load import loader_evidence
from perf_callbacks.analysis.judge.verdict import lead_cause
from perf_callbacks.analysis.results.recommendation import Recommendation
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult
from perf_callbacks.analysis.results.verdicts import Verdict
from perf_callbacks.analysis.trace.machine import cores_per_rank

MAX_CHARS = 180
"""The line before its path: window, verdict, one number, the first advice in a few words and its gain (about 20 of
them: ``: up to -26% step time``)."""

_FIGURE: dict[Verdict, tuple[str, str]] = {  # verdict -> (the loss behind it, what that share is)
    "host_bound": ("host", "device waiting on the host"),
    "sync_bound": ("sync", "device idle after syncs"),
    "copy_bound": ("copy", "copies"),
    "communication_bound": ("communication", "exposed collectives"),
    "unexplained_idle": ("other", "unexplained device idle"),
    "cpu_contention": ("cpu_contention", "waiting for a CPU"),
}
_ACTION: dict[Verdict, str] = {
    "copy_bound": "pin host memory and copy with non_blocking=True",
    "communication_bound": "overlap collectives with compute (bucket sizes, no_sync)",
    "unexplained_idle": "look at the idle gaps in the trace",
    "cpu_contention": "fewer threads than cores per rank, or other processes off the machine",
}


def console_parts(result: AnalysisResult) -> dict[str, str]:
    """``{verdict, figure, action}`` for the window's line, from the rank the result was judged on."""
    rank = next((r for r in result.ranks if r.verdict == result.verdict), result.ranks[0] if result.ranks else None)
    if rank is None:
        return {"verdict": result.verdict, "figure": "", "action": ""}
    parts = rank_parts(rank)
    if result.verdict == "compute_bound" and result.efficiency.mfu is not None and rank.gpu_utilization is not None:
        parts["figure"] += f", MFU {result.efficiency.mfu:.0%}"
    gain = verdict_gain(result)
    if gain and parts["action"]:
        parts["action"] += f": {gain}"
    return parts


def verdict_gain(result: AnalysisResult) -> str:
    """``up to -26% step time``: the gain of the recommendation the line's action is, "" when it has none.

    That is the verdict's own recommendation (its cause, ``sync`` for ``sync_bound``), which leads the list unless a
    measured gain outranks it (a compute advice without an MFU has none).
    """
    lead = lead_cause(result.verdict)
    rec = next((x for x in map(Recommendation.of, result.recommendations) if x.cause == lead), None)
    return gain_label(rec, per_step=False) if rec is not None and rec.estimated_gain_fraction is not None else ""


def rank_parts(r: RankResult) -> dict[str, str]:
    """``{verdict, figure, action}`` of one rank."""
    verdict = r.verdict
    if verdict == "input_bound":
        return {"verdict": verdict, "figure": f"data wait {_pct(r.data_wait_fraction)}", "action": _input_action(r)}
    if verdict == "compute_bound":
        if r.gpu_utilization is None:
            return {"verdict": verdict, "figure": "host compute, no device traced", "action": "speed up the host code"}
        busy = "GPU" if r.device_kind in (None, "cuda") else "device"
        action = "bf16/TF32, torch.compile, fused kernels" if busy == "GPU" else "speed up the device kernels"
        return {"verdict": verdict, "figure": f"{busy} busy {_pct(r.gpu_utilization)}", "action": action}
    cause, label = _FIGURE.get(verdict, ("", verdict))
    figure = f"{label} {_pct(r.losses.get(cause, 0.0))}" if cause else label
    return {"verdict": verdict, "figure": figure, "action": _action(r)}


def _action(r: RankResult) -> str:
    if r.verdict == "sync_bound":
        call = next(iter(r.sync_calls_ms), None)
        return f"remove {call} from the step" if call else "remove .item()/.cpu() from the step"
    if r.verdict == "host_bound":
        return "torch.compile or CUDA graphs, a larger batch" if r.device_kind in (None, "cuda") else \
            "fewer, larger ops and a larger batch"
    return _ACTION.get(r.verdict, "")


def _input_action(r: RankResult) -> str:
    evidence = loader_evidence(r, input_evidence(r).share) if r.load else None
    cores = cores_per_rank(r.machine)
    workers = r.machine.get("num_workers") if r.machine else None
    if evidence is None:
        if workers == 0 or (r.data_loader or "").startswith("enumerate(DataLoader)#_SingleProcess"):
            return f"try num_workers={suggest_num_workers(cores=cores)}"
        return "raise num_workers or prefetch_factor"
    d = decide(evidence)
    if d.kind in ("in_process", "io_wait", "cpu_bound", "mixed") and d.workers is not None:
        why = " (the workers wait on I/O)" if d.kind == "io_wait" else ""
        verb = "try" if d.kind == "in_process" else "raise num_workers to"
        return f"try num_workers={d.workers}" if verb == "try" else f"{verb} {d.workers}{why}"
    if d.kind == "one_core":
        return "a cheaper __getitem__ (one CPU core per rank: a worker would share it)"
    if d.kind in ("cpu_saturated", "cpu_bound", "mixed"):
        return "a cheaper __getitem__ or larger batches (workers busy on every core)"
    if d.kind == "handover":
        return "larger batches, fewer and larger tensors per batch"
    return "raise num_workers or prefetch_factor"


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.01 else f"{x:.1%}"

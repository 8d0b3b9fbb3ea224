"""``analyze``: from a path to an ``AnalysisResult`` (loader -> events -> timeline -> rank metrics -> verdicts)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import Any

from perf_callbacks.analysis.cluster import imbalance, stragglers
from perf_callbacks.analysis.events import load_rank
from perf_callbacks.analysis.loader import Window, find_windows
from perf_callbacks.analysis.rank import analyze_rank
from perf_callbacks.analysis.result import AnalysisResult, RankResult
from perf_callbacks.analysis.verdict import judge_rank, verdict_from


def analyze(path: str | Path, top_k: int = 10) -> AnalysisResult:
    """Analyses a trace file, a window folder of per-rank traces, or a whole ``output_dir``.

    With an ``output_dir`` every window is analysed; the result describes the most recent one (newest trace file)
    and ``result.windows`` summarises all of them, most recent first.

    Args:
        path: a ``.json``/``.json.gz`` Kineto trace, a folder of ``rank{R}.pt.trace.json[.gz]``, or a folder of those.
        top_k: how many top ops to keep.

    Raises:
        FileNotFoundError: when no trace is found under ``path``.
        ValueError: when the traces hold no events at all.
    """
    results = [analyze_window(w, top_k) for w in find_windows(path)]
    first = results[0]
    first.windows = [_summary(r) for r in results]
    return first


def analyze_window(window: Window, top_k: int = 10) -> AnalysisResult:
    """Analyses one window: every rank, then the verdict and stragglers across ranks."""
    ranks: list[RankResult] = []
    for f in window.files:
        r = analyze_rank(load_rank(f), top_k)
        if r is not None:
            judge_rank(r)
            ranks.append(r)
    if not ranks:
        raise ValueError(f"no profiled events in {window.path}")
    ranks.sort(key=lambda r: r.rank)
    slow, reasons = stragglers(ranks)
    ratio, spread = imbalance(ranks)
    losses = _mean_losses(ranks)
    verdict = verdict_from(losses)
    return AnalysisResult(
        path=str(window.path),
        verdict=verdict,
        gpu_utilization=_mean([r.gpu_utilization for r in ranks]),
        data_wait_fraction=_mean([r.data_wait_fraction for r in ranks]) or 0.0,
        step_time_ms=median(s.time_ms for r in ranks for s in r.steps) if any(r.steps for r in ranks) else None,
        top_ops=_merge_top_ops(ranks, top_k),
        peak_memory_bytes=max((r.peak_memory_bytes for r in ranks if r.peak_memory_bytes is not None), default=None),
        recommendations=_overall_recommendations(ranks, verdict, losses, slow, reasons),
        ranks=ranks,
        stragglers=slow,
        imbalance_ratio=ratio,
        step_time_spread_ms=spread,
        straggler_reasons=reasons,
    )


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _mean_losses(ranks: list[RankResult]) -> dict[str, float]:
    keys = {k for r in ranks for k in r.losses}
    return {k: sum(r.losses.get(k, 0.0) for r in ranks) / len(ranks) for k in keys}


def _merge_top_ops(ranks: list[RankResult], k: int) -> list[dict[str, Any]]:
    if len(ranks) == 1:
        return ranks[0].top_ops
    merged: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"self_time_us": 0.0, "count": 0})
    for r in ranks:
        for op in r.top_ops:
            m = merged[(op["name"], op["device"])]
            m["self_time_us"] += op["self_time_us"]
            m["count"] += op["count"]
    grand = sum(m["self_time_us"] for m in merged.values()) or 1.0
    rows = [{"name": n, "self_time_us": m["self_time_us"], "fraction": m["self_time_us"] / grand, "device": d,
             "count": m["count"]} for (n, d), m in merged.items()]
    return sorted(rows, key=lambda o: -o["self_time_us"])[:k]


def _overall_recommendations(
    ranks: list[RankResult], verdict: str, losses: dict[str, float], slow: list[int], reasons: dict[int, str]
) -> list[str]:
    """Straggler findings first, then the advice of the rank that suffers most from the overall verdict."""
    recs = [f"rank {rk} {reasons[rk]}; the other ranks wait for it in every collective" for rk in slow]
    matching = [r for r in ranks if r.verdict == verdict] or ranks
    worst = max(matching, key=lambda r: max(r.losses.values(), default=0.0))
    prefix = f"rank {worst.rank}: " if len(ranks) > 1 else ""
    recs += [prefix + text for text in worst.recommendations]
    return list(dict.fromkeys(recs))


def _summary(r: AnalysisResult) -> dict[str, Any]:
    return {"path": r.path, "verdict": r.verdict, "gpu_utilization": r.gpu_utilization,
            "step_time_ms": r.step_time_ms, "ranks": [x.rank for x in r.ranks], "stragglers": r.stragglers}

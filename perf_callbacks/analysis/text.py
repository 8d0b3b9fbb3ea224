"""The readable summary printed by ``perf-callbacks report`` and by the callbacks at the end of a window."""

from __future__ import annotations

from perf_callbacks.analysis.result import AnalysisResult, RankResult

_CAUSES = ("compute", "copy", "communication", "input", "sync", "host", "other")


def format_text(result: AnalysisResult, top_k: int = 5) -> str:
    """Render the verdict, the headline numbers, recommendations, top ops and, with several ranks, stragglers.

    Args:
        result: what ``analyze`` returned.
        top_k: how many top ops to list.
    """
    lines = [f"perf-callbacks report: {result.path}", f"verdict: {result.verdict}", *_headline(result), ""]
    lines += ["recommendations:"] + [f"  {i}. {t}" for i, t in enumerate(result.recommendations, 1)] + [""]
    lines += _ops(result, top_k)
    lines += _ranks(result)
    if len(result.windows) > 1:
        lines += ["", "other windows (most recent first):"]
        lines += [f"  {w['path']}: {w['verdict']}, GPU {_pct(w['gpu_utilization'])}" for w in result.windows[1:]]
    return "\n".join(lines).rstrip() + "\n"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} ms"


def _headline(result: AnalysisResult) -> list[str]:
    lines = [
        f"GPU utilization: {_pct(result.gpu_utilization)} (union of kernel/memcpy/memset time over the window)"
        if result.gpu_utilization is not None
        else "GPU utilization: n/a (CPU-only trace)",
        f"step time (median): {_ms(result.step_time_ms)}   data wait: {_pct(result.data_wait_fraction)}",
    ]
    if result.peak_memory_bytes is not None:
        total = next((r.device_memory_bytes for r in result.ranks if r.device_memory_bytes), None)
        of = f" of {total / 1e9:.0f} GB" if total else ""
        lines.append(f"peak memory allocated: {result.peak_memory_bytes / 1e9:.2f} GB{of}")
    if len(result.ranks) == 1:
        lines.append("time by cause: " + _causes(result.ranks[0]))
    return lines


def _causes(r: RankResult) -> str:
    span = sum(sum(s.causes_ms.values()) for s in r.steps) or 1.0
    parts = []
    for c in _CAUSES:
        ms = sum(s.causes_ms.get(c, 0.0) for s in r.steps)
        if ms / span >= 0.001:
            parts.append(f"{c} {ms / span:.1%}")
    return ", ".join(parts)


def _ops(result: AnalysisResult, top_k: int) -> list[str]:
    if not result.top_ops:
        return []
    device = result.top_ops[0]["device"]
    lines = [f"top ops by self {device} time:"]
    for op in result.top_ops[:top_k]:
        name = op["name"] if len(op["name"]) <= 60 else op["name"][:57] + "..."
        lines.append(f"  {op['fraction']:6.1%}  {op['self_time_us'] / 1e3:9.2f} ms  x{op['count']:<6} {name}")
    return lines


def _ranks(result: AnalysisResult) -> list[str]:
    if len(result.ranks) < 2:
        return []
    lines = ["", "ranks:"]
    for r in result.ranks:
        lines.append(f"  rank {r.rank}: {r.verdict}, step {_ms(r.step_time_ms)}, GPU {_pct(r.gpu_utilization)}, "
                     f"data wait {_pct(r.data_wait_fraction)}; {_causes(r)}")
    ratio = "n/a" if result.imbalance_ratio is None else f"{result.imbalance_ratio:.2f}"
    lines.append(f"step time spread: {_ms(result.step_time_spread_ms)}   imbalance ratio: {ratio}")
    lines.append(f"stragglers: {result.stragglers or 'none'}")
    lines += [f"  rank {rk}: {why}" for rk, why in result.straggler_reasons.items()]
    return lines

"""Analysis results built by hand: ranks whose step times the test sets exactly (for the HTML page's charts)."""

from __future__ import annotations

from perf_callbacks.analysis.result import AnalysisResult, RankResult, StepResult


def rank(n: int, step_ms: list[float], first_step: int = 10, tail_ms: float = 0.0) -> RankResult:
    """A rank whose steps take ``step_ms``: 70% compute, 20% communication, 10% sync.

    ``tail_ms`` is device work after the last step's end, counted in its causes (as a window's device tail is).
    """
    steps = [StepResult(first_step + i, ms, {"compute": 0.7 * ms, "communication": 0.2 * ms, "sync": 0.1 * ms})
             for i, ms in enumerate(step_ms)]
    steps[-1].causes_ms["compute"] += tail_ms
    span = sum(step_ms) + tail_ms
    r = RankResult(n, f"rank{n}.pt.trace.json", span, 0.9, 0.9, sorted(step_ms)[len(step_ms) // 2], 0.0, {}, steps,
                   {}, {}, [], None, None, [], None, [], {}, None)
    r.start_us, r.end_us, r.strip = 0.0, span * 1e3, "700c200m100s"
    r.memory_curve = [[span * i / 10, 1e9 + 1e8 * i] for i in range(11)]
    return r


def result(step_ms: list[list[float]], stragglers: tuple[int, ...] = (), tail_ms: float = 0.0,
           first_step: int = 10, path: str = "run/window") -> AnalysisResult:
    """A window of ``len(step_ms)`` ranks, rank r's steps taking ``step_ms[r]``."""
    ranks = [rank(i, ms, first_step, tail_ms) for i, ms in enumerate(step_ms)]
    med = sorted(s for r in ranks for s in (x.time_ms for x in r.steps))
    top = [{"name": "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)",
            "self_time_us": 5000.0, "fraction": 0.6, "device": "cuda", "count": 12},
           {"name": "aten::mm", "self_time_us": 2000.0, "fraction": 0.4, "device": "cuda", "count": 4}]
    return AnalysisResult(path, "communication_bound", 0.9, 0.0, med[len(med) // 2], top, None, [], ranks,
                          stragglers=list(stragglers))

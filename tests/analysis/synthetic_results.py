"""Analysis results built by hand: ranks whose step times the test sets exactly (for the HTML page's charts)."""

from __future__ import annotations

from perf_callbacks.analysis.results.result import AnalysisResult, RankResult, StepResult


def rank(n: int, step_ms: list[float], first_step: int = 10, tail_ms: float = 0.0) -> RankResult:
    """A rank whose steps take ``step_ms``: 70% compute, 20% communication, 10% sync.

    ``tail_ms`` is device work after the last step's end, counted in its causes (as a window's device tail is).
    """
    steps = [StepResult(first_step + i, ms, {"compute": 0.7 * ms, "communication": 0.2 * ms, "sync": 0.1 * ms})
             for i, ms in enumerate(step_ms)]
    steps[-1].causes_ms["compute"] += tail_ms
    span = sum(step_ms) + tail_ms
    r = RankResult(n, f"rank{n}.pt.trace.json", span, 0.9, 0.9, sorted(step_ms)[len(step_ms) // 2], 0.0, {}, steps,
                   {}, {}, [], [], None, [], {}, None)
    r.start_us, r.end_us, r.strip = 0.0, span * 1e3, "700c200m100s"
    r.memory.curve = [[span * i / 10, 1e9 + 1e8 * i] for i in range(11)]
    return r


def result(step_ms: list[list[float]], stragglers: tuple[int, ...] = (), tail_ms: float = 0.0,
           first_step: int = 10, path: str = "run/window") -> AnalysisResult:
    """A window of ``len(step_ms)`` ranks, rank r's steps taking ``step_ms[r]``."""
    ranks = [rank(i, ms, first_step, tail_ms) for i, ms in enumerate(step_ms)]
    med = sorted(s for r in ranks for s in (x.time_ms for x in r.steps))
    top = [{"name": "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)",
            "self_time_us": 5000.0, "fraction": 0.6, "device": "cuda", "count": 12},
           {"name": "aten::mm", "self_time_us": 2000.0, "fraction": 0.4, "device": "cuda", "count": 4}]
    return AnalysisResult(path, "communication_bound", 0.9, 0.0, med[len(med) // 2], top, [], ranks,
                          stragglers=list(stragglers))


def with_measures(r: AnalysisResult) -> AnalysisResult:
    """``r`` with an MFU and its gap, a collective, copies and launch latency (every chart the window can have)."""
    r.efficiency.mfu, r.efficiency.mfu_gap = 0.4, {"communication": 0.2, "sync": 0.1, "below_peak": 0.3}
    r.measures.communication = [{"name": "AllReduce", "group": "0", "count": 8, "bytes": 8e8, "total_ms": 20.0,
                        "exposed_ms": 5.0, "algbw_gbps": 40.0, "busbw_gbps": 70.0, "group_size": 2}]
    for rank in r.ranks:
        rank.measures.communication = [{**r.measures.communication[0], "exposed_ms": 5.0 * (1 + rank.rank)}]
    r.measures.copies = [
        {"kind": "HtoD", "memory": "pageable", "count": 4, "bytes": 4e8, "total_ms": 40.0, "gbps": 10.0},
        {"kind": "HtoD", "memory": "pinned", "count": 4, "bytes": 4e8, "total_ms": 16.0, "gbps": 25.0}]
    r.measures.launch = {"p50_us": 4.0, "p95_us": 30.0, "launch_call_p50_us": 6.0, "small_kernels": 100,
                "small_kernel_fraction": 0.2}
    return r

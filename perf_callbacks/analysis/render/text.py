"""The readable summary printed by ``perf-callbacks report`` and by the callbacks at the end of a window."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from perf_callbacks.analysis.compute.mfu import mfu_lines
from perf_callbacks.analysis.compute.modules_text import module_lines
from perf_callbacks.analysis.compute.roofline import roofline_lines
from perf_callbacks.analysis.judge.gains import gain_label
from perf_callbacks.analysis.measures.text import measure_lines, op_lines
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult
from perf_callbacks.analysis.windows.captured import capture_lines
from perf_callbacks.analysis.windows.hang import hang_lines

_CAUSES = ("compute", "copy", "communication", "input", "sync", "host", "other", "backlog")


def format_text(result: AnalysisResult, top_k: int = 5, sort: str = "device_time") -> str:
    """Render the verdict, the headline numbers, recommendations, top ops and, with several ranks, stragglers.

    Args:
        result: what ``analyze`` returned.
        top_k: how many top ops to list.
        sort: what orders them: ``device_time`` (self device time), ``self_cpu``, ``calls`` or ``memory``.
    """
    partial = " (partial window: fewer completed steps than planned)" if result.partial else ""
    lines = [f"perf-callbacks report: {result.path}{partial}", f"verdict: {verdict_line(result)}",
             *_headline(result), ""]
    lines += [*hang_lines(result.hang), ""] if result.hang else []
    lines += [f"note: {n}" for n in result.notes]
    lines += [f"skipped: {e}" for e in result.errors]
    lines += [""] if result.notes or result.errors else []
    lines += ["recommendations (largest estimated gain first):"]
    lines += [f"  {i}. [{gain_label(t)}] {t}" for i, t in enumerate(result.recommendations, 1)] + [""]
    lines += [f"precision: {result.measures.precision['text']}", ""] if result.measures.precision else []
    lines += _ops(result, top_k) if sort == "device_time" else op_lines(result, top_k, sort)
    lines += roofline_lines(result.measures.roofline, result.measures.roofline_peaks, top_k)
    lines += measure_lines(result)
    lines += module_lines(result)
    lines += _devices(result)
    lines += _ranks(result)
    if len(result.windows) > 1:
        lines += ["", "other windows and trace sets (most recent first):"]
        lines += [f"  {w['path']}{' (partial)' if w.get('partial') else ''}: {w['verdict']}, "
                  f"{_device(w['gpu_utilization'])}, ranks {w['ranks']}{_files(w)}" for w in result.windows[1:]]
    lines += capture_lines(result.captures)
    return "\n".join(lines).rstrip() + "\n"


def _files(window: dict[str, Any]) -> str:
    files = window.get("files") or []
    return f" ({', '.join(files)})" if 0 < len(files) <= 4 else ""


def verdict_line(result: AnalysisResult) -> str:
    """``compute_bound``, or ``compute_bound (input 10.4%, close to the 10% threshold)`` for a close call.

    Without any device in the trace, ``compute_bound`` says what it means: ``compute_bound (host compute, no device
    in the trace)``.
    """
    host = "host compute, no device in the trace" if result.verdict == "compute_bound" and result.device == "none" \
        else ""
    notes = "; ".join(n for n in (host, result.verdict_note) if n)
    return f"{result.verdict} ({notes})" if notes else result.verdict


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _device(utilization: float | None) -> str:
    return "no device" if utilization is None else f"GPU {utilization:.1%}"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} ms"


def _headline(result: AnalysisResult) -> list[str]:
    lines = [
        _utilization(result),
        f"step time (median): {_ms(result.step_time_ms)}   data wait: {_pct(result.data_wait_fraction)}",
    ]
    lines += mfu_lines(vars(result.efficiency))
    if result.memory.peak_bytes is not None:
        total = next((r.memory.device_bytes for r in result.ranks if r.memory.device_bytes), None)
        of = f" of {total / 1e9:.0f} GB" if total else ""
        lines.append(f"peak memory allocated: {result.memory.peak_bytes / 1e9:.2f} GB{of}")
    if len(result.ranks) == 1:
        lines.append("time by cause: " + _causes(result.ranks[0]))
    if result.loader is not None:
        lines.append(loader_line(result.loader))
    return lines


def loader_line(block: dict[str, Any]) -> str:
    """The loader block: ``loader: num_workers=2, workers on a CPU 3%, a batch 20.0 ms (p50), advice: io_wait``.

    The data wait's measured parts follow where the kernel said (``wait on a CPU 10%, blocked 85%, waiting for a CPU
    5%``), and the workers the advice names.

    Example:
        >>> loader_line({"num_workers": 0, "workers_cpu_fraction": None, "fetch_ms_p50": None, "advice_kind": "none"})
        'loader: num_workers=0, workers on a CPU n/a, a batch n/a (p50), advice: none'
        >>> loader_line({"num_workers": 0, "workers_cpu_fraction": None, "fetch_ms_p50": 85.0, "advice_kind":
        ...              "in_process", "advice_workers": 2, "wait_split": {"on_cpu": 0.1, "blocked": 0.8,
        ...              "waiting_for_cpu": 0.1}})
        ...              # doctest: +NORMALIZE_WHITESPACE
        'loader: num_workers=0, workers on a CPU n/a, a batch 85.0 ms (p50), wait on a CPU 10%, blocked 80%,
        waiting for a CPU 10%, advice: in_process (num_workers=2)'
    """
    workers = "unknown" if block["num_workers"] is None else block["num_workers"]
    cpu = block["workers_cpu_fraction"]
    split = block.get("wait_split")
    parts = f", wait on a CPU {split['on_cpu']:.0%}, blocked {split['blocked']:.0%}, waiting for a CPU " \
            f"{split['waiting_for_cpu']:.0%}" if split else ""
    n = f" (num_workers={block['advice_workers']})" if block.get("advice_workers") is not None else ""
    timed = ", timed in the workers" if block.get("fetch_timed") and block["num_workers"] else ""
    return f"loader: num_workers={workers}, workers on a CPU {'n/a' if cpu is None else f'{cpu:.0%}'}, a batch " \
           f"{_ms(block['fetch_ms_p50'])} (p50{timed}){parts}, advice: {block['advice_kind']}{n}"


def _utilization(result: AnalysisResult) -> str:
    first = result.ranks[0] if result.ranks else None
    window = f"; window: {first.window_definition}" if first and first.window_definition else ""
    if result.gpu_utilization is None:
        calls = sum(r.runtime_calls for r in result.ranks)
        why = f" ({calls} runtime calls but no kernel records)" if calls else ""
        return f"device: none in the trace (no device activity recorded{why}): every figure below is host time"
    kind = {"cuda": "GPU", None: "GPU"}.get(first.device_kind if first else None, "device")
    text = f"{kind} utilization: {_pct(result.gpu_utilization)} (union of kernel/memcpy/memset time{window})"
    backlog = _mean_of(r.backlog_fraction for r in result.ranks)
    if backlog >= 0.001:
        text += f"\nbacklog: {backlog:.1%} of the window the device was still running work queued before it " \
                "(not counted as busy, not host idle)"
    before, after = _mean_of(r.prologue_ms for r in result.ranks), _mean_of(r.epilogue_ms for r in result.ranks)
    if max(before, after) >= 0.1:
        text += f"\nhost only, outside the window: {before:.1f} ms before the first device op (start-up such as " \
                f"CUDA initialisation), {after:.1f} ms after the last"
    return text


def _mean_of(values: Iterable[float]) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0


def _devices(result: AnalysisResult) -> list[str]:
    if not result.devices:
        return []
    lines = ["", "devices:"]
    for d in result.devices:
        losses = ", ".join(f"{k} {v:.1%}" for k, v in sorted(d["losses"].items(), key=lambda kv: -kv[1]) if v >= 0.01)
        top = d["top_kernels"][0]["name"][:50] if d["top_kernels"] else "none"
        per_step = "n/a" if d["kernels_per_step"] is None else f"{d['kernels_per_step']:.0f}"
        lines.append(f"  rank {d['rank']} device {d['device']}: utilization {_pct(d['gpu_utilization'])}, "
                     f"{per_step} kernels/step, idle: {losses or 'none'}; top kernel {top}")
    return lines


def _causes(r: RankResult) -> str:
    """Each cause's share of the steps; of the whole window for a trace without ProfilerStep."""
    if r.steps:
        by_cause = {c: sum(s.causes_ms.get(c, 0.0) for s in r.steps) for c in _CAUSES}
    elif r.timeline is not None:
        by_cause = r.timeline.totals()
    else:  # read back without its timeline: the losses, already fractions of the window (on a GPU, the rest busy)
        by_cause = {c: r.losses.get(c, r.backlog_fraction if c == "backlog" else 0.0) for c in _CAUSES}
        by_cause["compute"] = 1.0 - sum(by_cause.values()) if r.gpu_utilization is not None else 0.0
    span = (sum(by_cause.values()) or 1.0) if r.steps or r.timeline is not None else 1.0
    text = ", ".join(f"{c} {by_cause[c] / span:.1%}" for c in _CAUSES if by_cause.get(c, 0.0) / span >= 0.001)
    if "cpu_contention" in r.losses:  # across the causes above: the thread was ready to run, in any of them
        text += f"; cpu_contention {r.losses['cpu_contention']:.1%} (waiting for a CPU, within the above)"
    return text


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
        lines.append(f"  rank {r.rank}: {r.verdict}, step {_ms(r.step_time_ms)}, {_device(r.gpu_utilization)}, "
                     f"data wait {_pct(r.data_wait_fraction)}; {_causes(r)}")
    ratio = "n/a" if result.imbalance_ratio is None else f"{result.imbalance_ratio:.2f}"
    lines.append(f"step time spread: {_ms(result.step_time_spread_ms)}   imbalance ratio: {ratio}")
    lines.append(f"stragglers: {result.stragglers or 'none'}")
    lines += [f"  rank {rk}: {why}" for rk, why in result.straggler_reasons.items()]
    lines.append(f"culprit (arrival order): {culprit_line(result)}")
    if result.merged_trace:
        lines.append(f"all ranks on one timeline: {result.merged_trace}")
    return lines


def culprit_line(result: AnalysisResult) -> str:
    """The culprit's line, or why none is named.

    Example:
        >>> from perf_callbacks.analysis.results.result import AnalysisResult
        >>> culprit_line(AnalysisResult("w", "compute_bound", None, 0.0, 10.0, [], [], []))
        'none (no rank is last at the collectives beyond chance, or the wait it causes is under 10% of a step)'
    """
    if result.culprit:
        return str(result.culprit["text"])
    return "none (no rank is last at the collectives beyond chance, or the wait it causes is under 10% of a step)"

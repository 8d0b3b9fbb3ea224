"""``analyze``: from a path to an ``AnalysisResult`` (discover -> per-rank results -> trace sets -> verdicts)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from statistics import median
from typing import Any

from perf_callbacks.analysis.compute.mfu import window_mfu
from perf_callbacks.analysis.compute.roofline import window_roofline
from perf_callbacks.analysis.judge.arrival import culprit
from perf_callbacks.analysis.judge.cluster import imbalance, stragglers
from perf_callbacks.analysis.judge.gains import straggler_gain, window_gains
from perf_callbacks.analysis.judge.verdict import HOST_UNTRACED, host_untraced, lead_cause, window_verdict
from perf_callbacks.analysis.rank.collect import Loaded, analyze_file, from_sidecar, load_all
from perf_callbacks.analysis.rank.measures import window_advice, window_measures, window_notes
from perf_callbacks.analysis.results.parts import MfuParts
from perf_callbacks.analysis.results.recommendation import Recommendation
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult
from perf_callbacks.analysis.results.verdicts import Verdict
from perf_callbacks.analysis.trace.discover import Window, discover
from perf_callbacks.analysis.windows.captured import captured_windows
from perf_callbacks.analysis.windows.hang import read_hangs
from perf_callbacks.analysis.windows.process_windows import process_windows
from perf_callbacks.analysis.windows.tracesets import assign_order_ranks, split_sets


def analyze(path: str | Path, top_k: int = 10, jobs: int = 1, sidecars: bool = True,
            peak_tbps: float | None = None) -> AnalysisResult:
    """Analyses a trace file, a window folder of per-rank traces, or a whole ``output_dir``.

    With an ``output_dir`` every window is analysed. The result describes the most recent window with completed
    steps (a full one before any partial one), ``result.windows`` summarises every window and trace set (the headline
    first), ``result.others`` holds their full results and ``result.errors`` one line per file that could not be read.

    Args:
        path: a ``.json``/``.json.gz`` Kineto trace, a folder of traces, or a folder of such folders.
        top_k: how many top ops to keep.
        jobs: parse up to this many files at once, in separate processes.
        sidecars: reuse ``rank{R}.summary.json`` sidecars that match their trace instead of parsing it.
        peak_tbps: the device's peak memory bandwidth in TB/s for the roofline, over what the traces say.

    Raises:
        FileNotFoundError: when no trace is found under ``path`` (the message says what was found).
        ValueError: when no trace could be analysed (the message gives each file's reason).
    """
    found = discover(path, sidecars)
    files = [f for w in found.windows for f in w.files]
    loaded = load_all([w.files for w in found.windows], top_k, jobs, sidecars)
    errors = [loaded[f].error or "" for f in files if loaded[f].error]
    entries = [r for w in found.windows for r in _window_results(w, [loaded[f] for f in w.files], top_k)]
    if not entries:
        raise ValueError(_unreadable(path, len(files), errors))
    if peak_tbps is not None:
        entries = [replace(entry, measures=replace(entry.measures, **window_roofline(entry.ranks, peak_tbps)))
                   for entry in entries]
    head = _headline(entries)
    ordered = [head] + [e for e in entries if e is not head]
    head.windows = [_summary(r) for r in ordered]
    head.others = ordered[1:]
    head.errors = errors
    head.hang = read_hangs(path)
    head.captures = captured_windows(head)
    if found.skipped:
        shown = ", ".join(f"{f.name} ({why})" for f, why in found.skipped[:3])
        more = f" and {len(found.skipped) - 3} more" if len(found.skipped) > 3 else ""
        head.notes.append(f"not traces, left out: {shown}{more}")
    return head


def _unreadable(path: str | Path, files: int, errors: list[str]) -> str:
    """Why nothing could be reported: each file's own line (it names the file and the reason)."""
    if files == 1 and len(errors) == 1:
        return errors[0]
    if not errors:
        return f"no profiled events in {path}"
    return f"none of the {files} trace files under {path} could be read: " + "; ".join(errors)


def analyze_window(window: Window, top_k: int = 10) -> AnalysisResult:
    """Analyses one window (its most recent trace set): every rank, then the verdict and stragglers across ranks.

    Every trace is parsed; a matching sidecar gives only its ``meta`` (whether the window is partial). Files that
    could not be read are in ``errors`` of the result.
    """
    loaded = [analyze_file(f, top_k) for f in window.files]
    for x in loaded:
        side = from_sidecar(x.path)
        x.meta = side.meta if side is not None else None
    results = _window_results(window, loaded, top_k)
    reasons = [x.error for x in loaded if x.error]
    if not results:
        if reasons:  # every file of the window failed to load: say why, not "no profiled events"
            raise ValueError(f"window {window.path}: {'; '.join(reasons)}")
        raise ValueError(f"no profiled events in {window.path}")
    results[0].errors = reasons
    return results[0]


def window_from_sidecars(window: Window) -> AnalysisResult | None:
    """The window's most recent trace set from its sidecars alone, or None when a trace has no matching sidecar.

    Sidecars keep 10 top ops per rank: enough to say whether the window is partial, not to compare its ops.
    """
    loaded = [from_sidecar(f) for f in window.files]
    if not all(loaded):
        return None
    results = _window_results(window, [x for x in loaded if x is not None], 10)
    return results[0] if results else None


def build_result(path: str, ranks: list[RankResult], top_k: int = 10) -> AnalysisResult:
    """Combine the judged rank results of one trace set into the window's result."""
    ranks.sort(key=lambda r: r.rank)
    slow, reasons = stragglers(ranks)
    ratio, spread = imbalance(ranks)
    losses = _mean_losses(ranks)
    verdict, margin = window_verdict(ranks)
    result = AnalysisResult(
        path=path,
        verdict=verdict,
        gpu_utilization=_mean([r.gpu_utilization for r in ranks]),
        data_wait_fraction=_mean([r.data_wait_fraction for r in ranks]) or 0.0,
        step_time_ms=median(s.time_ms for r in ranks for s in r.steps) if any(r.steps for r in ranks) else None,
        top_ops=_merge_top_ops(ranks, top_k),
        recommendations=window_advice(ranks, _overall_recommendations(ranks, verdict, slow, reasons)),
        ranks=ranks,
        stragglers=slow,
        imbalance_ratio=ratio,
        step_time_spread_ms=spread,
        straggler_reasons=reasons,
        verdict_margin=margin.margin,
        runner_up=margin.runner_up,
        verdict_note=margin.note,
        devices=[{"rank": r.rank, **d} for r in ranks for d in r.devices],
        device=next((r.device_kind or "cuda" for r in ranks if r.gpu_utilization is not None), "none"),
        notes=_aside_note(ranks) + window_notes(ranks),
        loader=_loader(ranks),
        culprit=culprit(ranks),
        **window_measures(ranks, top_k),
    )
    mfu, notes = window_mfu([r.flops for r in ranks], result.step_time_ms, losses)
    result = replace(result, efficiency=MfuParts(**mfu))
    result.notes += notes
    result.recommendations = window_gains(result, lead_cause(verdict))
    return result


def _window_results(window: Window, loaded: list[Loaded], top_k: int) -> list[AnalysisResult]:
    ok = [x for x in loaded if x.result is not None]
    ranks = [x.result for x in ok if x.result is not None]
    assign_order_ranks(ranks)
    metas = {x.result.path: x.meta for x in ok if x.result is not None}
    layers, notes = process_windows(ranks)
    bad = [f"{Path(r.path).name}: {r.bad_events} malformed events skipped (not objects, or without a "
           "numeric ts within 1e17 us, or with a dur over a week)" for r in ranks if r.bad_events]
    bad += [note for x in loaded for note in x.notes]
    bad += [f"{Path(r.path).name}: {HOST_UNTRACED}; idle time is not put down to the host" for r in ranks
            if host_untraced(r)]
    out = []
    for layer in layers:
        sets, set_notes = split_sets(layer)
        for i, members in enumerate(sets):
            path = members[0].path if len(layers) > 1 and len(members) == 1 else str(window.path)
            result = build_result(path, members, top_k)
            result.notes = notes + set_notes + bad + result.notes
            if len(sets) > 1:
                names = ", ".join(Path(r.path).name for r in members)
                result.notes.append(f"trace set {i + 1} of {len(sets)} in {window.path}: {names}")
            result.partial = _is_partial(window, members, [metas.get(r.path) for r in members])
            out.append(result)
    return out


def _is_partial(window: Window, ranks: list[RankResult], metas: list[dict[str, Any] | None]) -> bool:
    """Partial when a sidecar's meta says so (the engine's own record), else with fewer steps than the name promises.

    No rendered text (``summary.txt``) is read back.
    """
    flags = [bool(m["partial"]) for m in metas if m is not None and "partial" in m]
    if flags:
        return any(flags)
    expected = window.expected_steps
    return expected is not None and max(len(r.steps) for r in ranks) < expected


def _headline(entries: list[AnalysisResult]) -> AnalysisResult:
    """The most recent full window with completed steps; else the most recent with steps; else the most recent."""
    stepped = [e for e in entries if any(r.steps for r in e.ranks)]
    full = [e for e in stepped if not e.partial]
    return (full or stepped or entries)[0]


def _aside_note(ranks: list[RankResult]) -> list[str]:
    """One note with the time left out of the figures (validation, checkpoints, our own logging), when it matters.

    A kind under 1% of the window (our own logging, usually) changes no figure a reader would notice: not said.
    """
    span = sum(r.span_ms or 0.0 for r in ranks) / len(ranks)
    mean = {k: sum(r.set_aside_ms.get(k, 0.0) for r in ranks) / len(ranks) for r in ranks for k in r.set_aside_ms}
    kinds = sorted(k for k, ms in mean.items() if ms >= 0.01 * span)
    if not kinds:
        return []
    what = " and ".join(f"{k} {mean[k]:.1f} ms" for k in kinds)
    per = f" per rank (mean of {len(ranks)})" if len(ranks) > 1 else ""
    gpu = any(r.gpu_utilization is not None for r in ranks)  # a trace without a device has no GPU utilization
    causes = "data wait, a cause of idle time or GPU utilization" if gpu else "data wait or a cause of idle time"
    return [f"{what}{per} set aside in this window: not step time, {causes}"]


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _loader(ranks: list[RankResult]) -> dict[str, Any] | None:
    """The loader block of the rank that waited longest for data (None without one)."""
    blocks = sorted((r for r in ranks if r.loader is not None), key=lambda r: -r.data_wait_fraction)
    return blocks[0].loader if blocks else None


def _mean_losses(ranks: list[RankResult]) -> dict[str, float]:
    keys = {k for r in ranks for k in r.losses}
    return {k: sum(r.losses.get(k, 0.0) for r in ranks) / len(ranks) for k in keys}


def _merge_top_ops(ranks: list[RankResult], k: int) -> list[dict[str, Any]]:
    if len(ranks) == 1:
        return ranks[0].top_ops[:k]
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
    ranks: list[RankResult], verdict: Verdict, slow: list[int], reasons: dict[int, str]
) -> list[Recommendation]:
    """Straggler findings, then the advice of the rank that suffers most from the overall verdict (ranked later)."""
    recs = [straggler_gain(ranks, rk, f"rank {rk} {reasons[rk]}; the other ranks wait for it in every collective")
            for rk in slow]
    matching = [r for r in ranks if r.verdict == verdict] or ranks
    worst = max(matching, key=lambda r: max(r.losses.values(), default=0.0))
    prefix = f"rank {worst.rank}: " if len(ranks) > 1 else ""
    recs += [rec.retext(prefix + rec) for rec in map(Recommendation.of, worst.recommendations)]
    return list(dict.fromkeys(recs))


def _summary(r: AnalysisResult) -> dict[str, Any]:
    return {"path": r.path, "verdict": r.verdict, "gpu_utilization": r.gpu_utilization,
            "step_time_ms": r.step_time_ms, "ranks": [x.rank for x in r.ranks], "stragglers": r.stragglers,
            "partial": r.partial, "verdict_note": r.verdict_note,
            "files": [Path(x.path).name for x in r.ranks]}

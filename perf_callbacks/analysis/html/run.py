"""The HTML report's run overview: every window of the run in step order, one row each, on shared scales.

It answers "does the run get slower?" at a glance: step time by cause, MFU and peak memory per window, and each
window's verdict. Built from the results alone (which a report of a run reads from the sidecars), no trace is read.
"""

from __future__ import annotations

import re
from html import escape

from perf_callbacks.analysis.html.chart import byte_unit, figure, hbars, scale_to
from perf_callbacks.analysis.html.ranks import mean_causes
from perf_callbacks.analysis.html.window import legend, stacked
from perf_callbacks.analysis.measures.text import size
from perf_callbacks.analysis.results.result import AnalysisResult
from perf_callbacks.analysis.trace.timeline import CAUSES

_WINDOW = re.compile(r"window-0*(\d+)-0*(\d+)(?:[/\\][^/\\]*)?$")


def steps_of(r: AnalysisResult) -> tuple[int, int] | None:
    """The window's first and last training step: from its folder (``window-000012-000014``), else its ProfilerSteps.

    Example:
        >>> steps_of(AnalysisResult("run/window-000012-000014", "compute_bound", None, 0.0, None, [], [], []))
        (12, 14)
    """
    folder = _WINDOW.search(r.path)
    if folder:
        return int(folder.group(1)), int(folder.group(2))
    steps = [s.step for x in r.ranks for s in x.steps]
    return (min(steps), max(steps)) if steps else None


def in_run_order(results: list[AnalysisResult]) -> list[AnalysisResult]:
    """The windows by their first step (windows without steps last, in the order given)."""
    return sorted(results, key=lambda r: (steps_of(r) or (float("inf"), 0))[0])


def window_name(r: AnalysisResult) -> str:
    """``steps 12-14``, else the last part of the window's path."""
    steps = steps_of(r)
    if steps:
        return f"steps {steps[0]}-{steps[1]}"
    return r.path.rstrip("/").rsplit("/", 1)[-1]


def run_overview(results: list[AnalysisResult], anchors: dict[int, str] | None = None) -> str:
    """The overview of the run's windows (nothing for one window); ``anchors``: ``id(result)`` -> its section's id."""
    if len(results) < 2:
        return ""
    ordered = in_run_order(results)
    names = [window_name(r) for r in ordered]
    rows = [(name, window_mean(r), f"{name} ({r.verdict}): ", "") for name, r in zip(names, ordered, strict=True)]
    parts = ["<h2>The run, window by window</h2>", _verdicts(names, ordered, anchors or {})]
    if any(c for _, c, _, _ in rows):
        scale = scale_to(max(sum(c.values()) for _, c, _, _ in rows), "ms")
        parts.append(figure("Mean step by cause, per window", "Windows top to bottom in run order: bars that grow "
                            "down the page are a run that slows down; a colour that grows is why.",
                            stacked(rows, scale, "windows"), key=legend()))
    mfu = [(n, 100 * m, f"MFU {m:.1%}") for n, r in zip(names, ordered, strict=True)
           if (m := r.efficiency.mfu) is not None]
    if mfu:
        parts.append(figure("MFU, per window", "Model FLOPs utilization of each window: a falling bar is a run that "
                            "degrades.", hbars(mfu, "%", "windows-mfu", "#455a64", fmt="{:.1f}")))
    peaks = [(n, r.memory.peak_bytes) for n, r in zip(names, ordered, strict=True) if r.memory.peak_bytes]
    per, unit = byte_unit(max((b for _, b in peaks), default=0))
    mem = [(n, b / per, f"{size(b)} peak allocated") for n, b in peaks]
    if mem:
        parts.append(figure("Peak memory, per window", "Peak allocated memory of each window: a bar that grows window "
                            "after window is memory that is never freed.", hbars(mem, unit, "windows-memory",
                                                                                 "#00838f")))
    return "".join(parts)


def window_mean(r: AnalysisResult) -> dict[str, float]:
    """The window's mean step, ms by cause, over its ranks (each step as drawn: within its own time)."""
    ranks = [mean_causes(x) for x in r.ranks if x.steps]
    if not ranks:
        return {}
    return {c: sum(m.get(c, 0.0) for m in ranks) / len(ranks) for c in CAUSES if any(c in m for m in ranks)}


def _verdicts(names: list[str], ordered: list[AnalysisResult], anchors: dict[int, str]) -> str:
    rows = "".join(
        f'<tr><td><a href="#{anchors.get(id(r), "")}">{escape(n)}</a></td>'
        f'<td class="v-{escape(r.verdict)}">{escape(r.verdict)}</td>'
        f"<td>{'n/a' if r.step_time_ms is None else f'{r.step_time_ms:.1f} ms'}</td>"
        f"<td>{'n/a' if r.gpu_utilization is None else f'{r.gpu_utilization:.0%}'}</td>"
        f"<td>{escape(', '.join(map(str, r.stragglers)) or 'none')}</td>"
        f"<td>{escape(_culprit_cell(r))}</td></tr>"
        for n, r in zip(names, ordered, strict=True))
    return "<table class=\"windows\"><tr><th>window</th><th>verdict</th><th>step (median)</th><th>GPU busy</th>" \
           f"<th>stragglers</th><th>culprit</th></tr>{rows}</table>"


def _culprit_cell(r: AnalysisResult) -> str:
    c = r.culprit
    if not c:
        return "none"
    phase = f", {c['phase']}" if c.get("phase") else ""
    return f"rank {c['rank']}{phase}: last in {c['last_share']:.0%}, {c['wait_ms_each']:.1f} ms each"

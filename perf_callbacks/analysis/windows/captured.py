"""Captured windows in a report: why each was opened, and what differs from the nearest healthy window of the run.

A captured window's sidecars hold its ``capture`` block (``core/triggers/captures.py``: ``{reason, step, step_ms,
median_ms, ratio}``). ``report`` on a run folder compares each captured window with the scheduled window nearest to it
(by step) with ``diff``'s comparison (``analysis/diff/compare.py``): the step-time change, whether it is beyond the
noise, and the causes and operators behind it.

Example:
    >>> capture_text({"reason": "anomaly", "step": 1841, "step_ms": 412.0, "median_ms": 121.0, "ratio": 3.4})
    'step 1,841 took 412 ms, 3.4x the median 121 ms'
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from perf_callbacks._input_files import read_json
from perf_callbacks.analysis.diff.compare import compare, summarize
from perf_callbacks.analysis.results.result import AnalysisResult

WINDOW_NAME = re.compile(r"window-(\d+)-(\d+)$")


def capture_text(meta: dict[str, Any]) -> str:
    """Why a window was captured, from its ``capture`` block: ``step 1,841 took 412 ms, 3.4x the median 121 ms``."""
    reason, step = meta.get("reason"), meta.get("step")
    step_ms, median_ms, ratio = meta.get("step_ms"), meta.get("median_ms"), meta.get("ratio")
    if reason == "anomaly" and step_ms and median_ms and ratio:
        return f"step {step:,} took {step_ms:,.0f} ms, {ratio:.1f}x the median {median_ms:,.0f} ms"
    if reason == "slowdown" and ratio:
        return f"the slowdown alarm at step {step:,}: the median step has been {ratio:.2f}x this run's baseline"
    if reason == "memory_growth":
        return f"the memory growth warning at step {step:,}: to name the operator whose allocations stay alive"
    if reason == "signal":
        return f"requested by {meta.get('request') or 'a signal'} during step {step:,}"
    if reason == "file":
        return f"requested by a capture file (request {meta.get('request')}) during step {step:,}"
    return f"captured at step {step} ({reason})"


def captured_windows(head: AnalysisResult) -> list[dict[str, Any]]:
    """One entry per captured window among ``head`` and ``head.others``, with the nearest healthy window's diff.

    Each is ``{window, capture, why, step_time_ms, baseline, baseline_step_time_ms, difference}`` (``baseline`` None
    when the run has no healthy window).
    """
    entries = [head, *head.others]
    metas = {id(e): _capture_meta(e.path) for e in entries}
    healthy = [e for e in entries if metas[id(e)] is None and not e.partial and _first_step(e.path) is not None]
    found = []
    for entry in entries:
        meta = metas[id(entry)]
        if meta is None:
            continue
        item: dict[str, Any] = {
            "window": Path(entry.path).name,
            "capture": meta,
            "why": capture_text(meta),
            "step_time_ms": entry.step_time_ms,
            "baseline": None,
        }
        first = _first_step(entry.path) or 0
        base = min(healthy, key=lambda h: abs((_first_step(h.path) or 0) - first), default=None)
        if base is not None:
            item.update(
                baseline=Path(base.path).name,
                baseline_step_time_ms=base.step_time_ms,
                difference=_difference(base, entry),
            )
        found.append(item)
    return found


def capture_lines(captures: list[dict[str, Any]]) -> list[str]:
    """The report's lines for :func:`captured_windows`."""
    if not captures:
        return []
    lines = ["", "captured windows:"]
    for c in captures:
        lines.append(f"  {c['window']}: {c['why']}")
        if c.get("baseline") is None:
            lines.append("    no healthy (scheduled) window in this run to compare it with")
        elif c.get("difference"):
            lines.append(f"    against {c['baseline']} (scheduled): {c['difference']}")
    return lines


def _difference(base: AnalysisResult, new: AnalysisResult) -> str | None:
    try:
        return summarize(compare(base, new))
    except Exception:  # noqa: BLE001 - a comparison that cannot be made is left out, the report goes on
        return None


def _capture_meta(path: str) -> dict[str, Any] | None:
    """The ``capture`` block of the window at ``path`` (a window folder or a trace in one), from its sidecars."""
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    for sidecar in sorted(folder.glob("rank*.summary.json")):
        try:
            capture = read_json(sidecar).get("meta", {}).get("capture")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(capture, dict):
            return capture
    return None


def _first_step(path: str) -> int | None:
    p = Path(path)
    match = WINDOW_NAME.search(p.name if p.is_dir() else p.parent.name)
    return int(match.group(1)) if match else None

"""Trace analysis: numbers, a verdict and ranked recommendations from Kineto traces. Standard library only.

Example:
    >>> from perf_callbacks.analysis import analyze, format_text  # doctest: +SKIP
    >>> print(format_text(analyze("output_dir/run/window-000012-000014")))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perf_callbacks.analysis.diff.compare import DiffResult, compare
    from perf_callbacks.analysis.diff.text import format_diff
    from perf_callbacks.analysis.html.diff_page import render_diff_html
    from perf_callbacks.analysis.html.page import render_html
    from perf_callbacks.analysis.render.text import format_text
    from perf_callbacks.analysis.results.result import AnalysisResult, RankResult, StepResult
    from perf_callbacks.analysis.results.verdicts import VERDICTS
    from perf_callbacks.analysis.trace.sidecar_store import read_sidecar, sidecar_path
    from perf_callbacks.analysis.windows.api import analyze, analyze_window
    from perf_callbacks.analysis.windows.diff_sides import diff_paths

_WHERE = {
    "DiffResult": "diff.compare", "compare": "diff.compare", "format_diff": "diff.text",
    "render_diff_html": "html.diff_page", "render_html": "html.page", "format_text": "render.text",
    "AnalysisResult": "results.result", "RankResult": "results.result", "StepResult": "results.result",
    "VERDICTS": "results.verdicts", "read_sidecar": "trace.sidecar_store", "sidecar_path": "trace.sidecar_store",
    "analyze": "windows.api", "analyze_window": "windows.api", "diff_paths": "windows.diff_sides",
}
"""Where each name lives: imported on first use, so that ``report --json`` never loads the HTML, text or diff code."""


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "VERDICTS",
    "AnalysisResult",
    "DiffResult",
    "RankResult",
    "StepResult",
    "analyze",
    "analyze_window",
    "compare",
    "diff_paths",
    "format_diff",
    "format_text",
    "read_sidecar",
    "render_diff_html",
    "render_html",
    "sidecar_path",
]

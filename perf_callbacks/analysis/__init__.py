"""Trace analysis: numbers, a verdict and ranked recommendations from Kineto traces. Standard library only.

Example:
    >>> from perf_callbacks.analysis import analyze, format_text  # doctest: +SKIP
    >>> print(format_text(analyze("output_dir/run/window-000012-000014")))  # doctest: +SKIP
"""

from __future__ import annotations

from perf_callbacks.analysis.api import analyze, analyze_window
from perf_callbacks.analysis.html import render_html
from perf_callbacks.analysis.result import VERDICTS, AnalysisResult, RankResult, StepResult
from perf_callbacks.analysis.sidecar_store import read_sidecar, sidecar_path
from perf_callbacks.analysis.text import format_text

__all__ = [
    "VERDICTS",
    "AnalysisResult",
    "RankResult",
    "StepResult",
    "analyze",
    "analyze_window",
    "format_text",
    "read_sidecar",
    "render_html",
    "sidecar_path",
]

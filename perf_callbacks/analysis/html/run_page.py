"""The run's HTML page, ``report.html`` next to the window folders, rebuilt from the sidecars alone.

The background worker calls :func:`write_run_page` after each window's summary: it reads the sidecars written so far
(never a trace), so each call costs a few JSON reads per window. A window whose ranks have no sidecar yet is drawn
from the ranks that have one, and a window with none is left out (``report RUN --html`` parses what is missing).
"""

from __future__ import annotations

from pathlib import Path

from perf_callbacks.analysis.html.page import render_html
from perf_callbacks.analysis.html.run import in_run_order
from perf_callbacks.analysis.rank.collect import from_sidecar
from perf_callbacks.analysis.results.result import AnalysisResult
from perf_callbacks.analysis.trace.discover import discover
from perf_callbacks.analysis.trace.sidecar_store import write_atomic
from perf_callbacks.analysis.windows.api import _window_results

PAGE = "report.html"
"""The run page's name, in the run's folder."""


def run_results(run_dir: Path) -> list[AnalysisResult]:
    """Every window of ``run_dir`` that has at least one sidecar, in run order (no trace is parsed)."""
    out = []
    for window in discover(run_dir).windows:
        loaded = [x for x in (from_sidecar(f) for f in window.files) if x is not None and x.result is not None]
        results = _window_results(window, loaded, 10) if loaded else []
        if results:
            if len(loaded) < len(window.files):
                results[0].notes.append(f"{len(loaded)} of {len(window.files)} ranks had a summary when this page "
                                        "was written")
            out.append(results[0])
    return in_run_order(out)


def write_run_page(run_dir: Path) -> Path | None:
    """Write ``run_dir/report.html`` for every window summarised so far; return it (None with no window yet).

    The most recent window comes first, as ``perf-callbacks report RUN --html`` shows it.
    """
    results = run_results(run_dir)
    if not results:
        return None
    head = results[-1]
    head.others = list(reversed(results[:-1]))
    page = run_dir / PAGE
    write_atomic(page, render_html(head))
    return page

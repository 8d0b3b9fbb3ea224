"""The end-of-window summary: analyse the reporting rank's trace, print it, save it, log it.

The numbers come from :mod:`perf_callbacks.analysis` (the same code as ``perf-callbacks report``), plus what the
engine measured itself: step time and data wait of the window's steps, and peak memory.
"""

from __future__ import annotations

import logging
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.traces import write_text

if TYPE_CHECKING:
    from perf_callbacks.core.engine import RunContext
    from perf_callbacks.core.memory import MemorySampler

log = logging.getLogger(__name__)


class WindowReporter:
    """Writes ``summary.txt`` next to the traces and prints it on the reporting rank (rank 0 by default).

    Args:
        config: ``summary`` and ``top_k`` are used.
        ctx: where to log scalars and text.
        is_reporter: only this rank analyses and prints.
    """

    def __init__(self, config: PerfConfig, ctx: RunContext, is_reporter: bool) -> None:
        self.config, self.ctx = config, ctx
        self.enabled = config.summary and is_reporter
        self.texts: list[str] = []

    def report(
        self,
        trace: Path,
        window: tuple[int, int],
        step_times: list[float],
        data_wait: float,
        error: BaseException | None,
        memory: MemorySampler | None,
        phase_peak: str | None = None,
    ) -> str | None:
        """Build, print, save and log the summary of one window; returns its text.

        ``phase_peak`` is the per-phase headline, e.g. ``peak in backward: 31.2 of 80 GB (step 40)`` (CUDA).
        """
        if not self.enabled:
            return None
        head = _header(window, step_times, data_wait, error, memory, self.ctx.rank)
        if phase_peak:
            head.append(f"  {phase_peak}")
        body, scalars = _analyse(trace, self.config.top_k)
        text = "\n".join([*head, body, f"trace: {trace}"]).rstrip() + "\n"
        write_text(trace.parent / "summary.txt", text)
        print(text, file=sys.stdout, flush=True)
        self.texts.append(text)
        step = window[1] + 1
        log_scalars = self.ctx.log_summary or self.ctx.log_metrics
        if log_scalars is not None and scalars:
            log_scalars(scalars, step)
        if self.ctx.log_text is not None:
            self.ctx.log_text("perf/summary", f"```\n{text}```", step)
        return text


def _header(
    window: tuple[int, int],
    step_times: list[float],
    data_wait: float,
    error: BaseException | None,
    memory: MemorySampler | None,
    rank: int,
) -> list[str]:
    status = f" (interrupted by {type(error).__name__})" if error is not None else ""
    lines = [f"perf-callbacks summary: steps {window[0]}-{window[1]}, rank {rank}{status}"]
    if step_times:
        share = data_wait / sum(step_times) if sum(step_times) > 0 else 0.0
        lines.append(
            f"  step time {statistics.median(step_times) * 1e3:.2f} ms (median of {len(step_times)}), "
            f"data wait {share:.1%} of step time (profiler on)"
        )
    peak = memory.peak_allocated_mb() if memory is not None else None
    if peak is not None:
        lines.append(f"  peak allocated memory {peak:.0f} MB")
    return lines


def _analyse(trace: Path, top_k: int) -> tuple[str, dict[str, float]]:
    try:
        from perf_callbacks.analysis import analyze, format_text

        result = analyze(trace)
        return format_text(result, top_k=top_k), dict(result.scalars())
    except Exception as err:  # noqa: BLE001 - a summary must never break training
        log.warning("perf-callbacks: trace analysis failed (%s: %s)", type(err).__name__, err)
        return f"  (trace analysis unavailable: {type(err).__name__}: {err})", {}



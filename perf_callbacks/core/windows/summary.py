"""The end-of-window summary: its header, and printing and logging it once its background job is done.

The body comes from :mod:`perf_callbacks.analysis` (the same code as ``perf-callbacks report``), run on the reporting
rank's trace in a background process (see :mod:`perf_callbacks.core.windows.background`), so every figure in it (step
time, data wait, GPU utilization) is measured on the trace, and each appears once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from perf_callbacks.analysis.windows.captured import capture_text
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.files.outputs import Outputs


def window_header(meta: dict[str, Any], rank: int, completed: int) -> list[str]:
    """The summary's first lines: which steps, which rank, and whether the window is partial or interrupted."""
    first, last = meta["window"]
    notes = []
    if meta["partial"]:
        planned = meta["planned"][1] - meta["planned"][0] + 1
        notes.append(f"partial: {completed} of {planned} scheduled steps completed")
    if meta["interrupted"]:
        notes.append(f"interrupted by {meta['interrupted']}")
    status = f" ({'; '.join(notes)})" if notes else ""
    lines = [f"perf-callbacks summary: steps {first}-{last}, rank {rank}{status}"]
    if meta.get("capture"):
        lines.append(f"  captured: {capture_text(meta['capture'])}")
    if meta.get("data_wait") == "not measured":
        lines.append("  data wait: not measured in the loop (the DataLoader's next() is not timed); "
                     "the figure below is read from the trace's DataLoader spans, if any")
    if meta.get("stall_ms") is not None:
        lines.append(f"  overhead: the training loop waited {meta['stall_ms']:.0f} ms for this window's export; "
                     "compression and analysis ran in the background")
    if meta.get("compile_s"):
        lines.append(f"  torch.compile compiled for {meta['compile_s']:.2f} s in this window's steps (set aside from "
                     "the figures below, as validation is)")
    if meta.get("phase_peak"):
        lines.append(f"  {meta['phase_peak']} (allocator counters, not the trace)")
    lines.append(f"  the figures below come from rank {rank}'s trace of this window")
    return lines


def publish_summary(ctx: RunContext, text: str, scalars: dict[str, float], window_last: int,
                    outputs: Outputs | None = None, line: str | None = None) -> None:
    """Print the summary and log it (scalars and text) at the step after the window.

    The console gets ``line`` when given (the default: one line per window), else the whole summary. A logger that
    raises turns the ``metrics`` writer off with one warning (``outputs``); it never reaches training.
    """
    say(text if line is None else line)
    step, outputs = window_last + 1, outputs or Outputs()
    log_scalars, log_text = ctx.log_summary or ctx.log_metrics, ctx.log_text
    if log_scalars is not None and scalars:
        outputs.call("metrics", lambda: log_scalars(scalars, step))
    if log_text is not None:
        outputs.call("metrics", lambda: log_text("perf/window/summary", f"```\n{text}```", step))


def window_line(console: dict[str, str] | None, meta: dict[str, Any], folder: Path) -> str:
    """The window's one console line: its steps, verdict, the one number behind it, the first advice, the folder.

    ``console`` is the analysis' own data (``perf_callbacks.analysis.render.console``), never read back from the
    summary's text; None when the analysis gave none (the summary says why).

    Example:
        >>> window_line({"verdict": "input_bound", "figure": "data wait 31%", "action": "try num_workers=4"},
        ...             {"window": [12, 14], "partial": False}, Path("w"))
        'perf-callbacks: steps 12-14 input_bound: data wait 31%; try num_workers=4 -> w/summary.txt'
    """
    first, last = meta["window"]
    head = f"perf-callbacks: steps {first}-{last}{' (partial)' if meta.get('partial') else ''}"
    if console is None:
        return f"{head}: no verdict (the trace could not be analysed) -> {folder / 'summary.txt'}"
    said = "; ".join(part for part in (console["figure"], console["action"]) if part)
    return f"{head} {console['verdict']}{': ' + said if said else ''} -> {folder / 'summary.txt'}"


def console_text(text: str) -> str:
    """The summary as printed: every line starts with ``perf-callbacks`` (body lines get ``perf-callbacks: ``)."""
    return "\n".join(line if line.startswith("perf-callbacks") else f"perf-callbacks: {line}".rstrip()
                     for line in text.rstrip("\n").splitlines())


def say(text: str, file: TextIO | None = None) -> None:
    """Print ``text`` (prefixed) on ``file`` (stdout by default), never on the line of a progress bar.

    Lightning's and transformers' bars are tqdm bars: while one is on screen tqdm clears it, we print, and tqdm redraws
    it below (``tqdm.write``), as Lightning's own ``ProgressBar.print`` does. tqdm is used only when already imported.
    """
    text, printed, file = console_text(text), False, file or sys.stdout
    tqdm_std = sys.modules.get("tqdm.std")
    if tqdm_std is not None and getattr(tqdm_std.tqdm, "_instances", None):
        try:
            with tqdm_std.tqdm.external_write_mode(file=file):
                print(text, file=file, flush=True)
                printed = True
        except Exception:  # a bar that cannot be cleared or redrawn never stops the summary
            pass
    if not printed:
        print(text, file=file, flush=True)

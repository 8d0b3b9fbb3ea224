"""The ledger's console line at the end of training, on the reporting rank (``analysis/ledger/``).

``perf-callbacks: 41 min, goodput 72%: checkpoints 14%, data 4% -> <run>``: read back from the step record just
written at close (a few megabytes at most), on stderr (on a line of its own, a tqdm bar redrawn below), never raising
into training (close calls it under ``quiet``). A resumed run adds the steps it did again (``ledger/resume.py``).
"""

from __future__ import annotations

import sys

from perf_callbacks.analysis.diff.steps import read_record
from perf_callbacks.analysis.ledger.parts import rank_ledger
from perf_callbacks.analysis.ledger.text import summary_line
from perf_callbacks.core.engine.step_log import StepLog
from perf_callbacks.core.windows.summary import say

__all__ = ["console_line"]


def console_line(steps: StepLog) -> str | None:
    """Print the ledger's line of the rank whose record ``steps`` wrote; returns it (None: no record, or it is off)."""
    if steps.off or not steps.path.is_file():
        return None
    led = rank_ledger(read_record(steps.path))
    if led is None:
        return None
    resumed = f"; {led.resumed.text()}" if led.resumed is not None else ""
    line = f"perf-callbacks: {summary_line(led)}{resumed} -> {steps.path.parent}"
    say(line, file=sys.stderr)  # under a progress bar still on screen (transformers closes its bar after us)
    return line

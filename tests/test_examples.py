"""The examples, run as documented (their defaults: loaders with persistent workers), end soon after their last window.

A fork of the user's at the worst moment of each window (a persistent ``DataLoader`` worker started while the
window's analysis process is being started, see :mod:`tests.integrations.example_runs`) must hold neither the
analysis nor the run: each example prints a verdict line for every window and exits within ``AFTER_ANALYSIS_S`` of
the end of training or of its last analysis process's exit, whichever is later (before the fix: ``CLOSE_WAIT_S``,
120 s, then "still being written in the background", and the last verdict lost). The time the examples train after
their last window depends on the machine; the bound does not count it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integrations.example_runs import run_example

pytestmark = pytest.mark.slow

AFTER_ANALYSIS_S = 10.0


@pytest.mark.parametrize("example", ["transformers/train.py", "lightning/train.py", "accelerate/train.py"])
def test_an_example_ends_soon_after_its_last_window_with_a_verdict_for_each(tmp_path: Path, example: str) -> None:
    run = run_example(example, tmp_path)
    output = "\n".join(run.lines)
    assert run.returncode == 0, output
    assert len(run.windows) == 2, output  # the examples' schedule: repeat=2
    assert run.verdicts() == set(run.windows), output
    assert "still being written in the background" not in output
    assert len(run.analyses) == len(run.windows)
    assert run.after_last_analysis_s() < AFTER_ANALYSIS_S, output

"""Profiling windows (``core/window.py``) driven through the engine, as an adapter would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A user's own torch.profiler, started and stopped inside one step of our window, stops ours too (torch has one
# profiler state). Touching our session after that (stopping it, exporting it) crashes inside torch: a segfault, so
# the run is a separate process.
USER_PROFILER_IN_OUR_WINDOW = """
import sys, warnings
import torch
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine import PerfEngine, RunContext
from perf_callbacks.exceptions import InstrumentUnavailableWarning

out, theirs = sys.argv[1], int(sys.argv[2])
cfg = PerfConfig.from_dict({"schedule": {"skip_first": 2, "wait": 0, "warmup": 1, "active": 3}, "summary": False})
engine = PerfEngine(cfg, RunContext(output_dir=out, run_name="run", log_every_n_steps=5))
x = torch.randn(8, 8, requires_grad=True)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for step in range(8):  # warm-up at step 2, window 3-5
        engine.data_start()
        engine.data_end()
        engine.batch_start(step)
        if step == theirs:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
                (x @ x).sum().backward()
        else:
            (x @ x).sum().backward()
        engine.batch_end(stepped=True, samples=8)
    engine.close()
ours = [str(w.message) for w in seen if issubclass(w.category, InstrumentUnavailableWarning)]
print("WARNINGS", len(ours), "|".join(ours))
print("EXPORTED", len(engine.exported), "PROFILER_ON", torch.autograd.profiler._is_profiler_enabled)
"""


@pytest.mark.parametrize("theirs", [4, 5], ids=["mid-window", "last-step"])
def test_a_user_profiler_in_any_step_of_our_window_is_survived(tmp_path: Path, theirs: int) -> None:
    """In the window's last step, ours is stopped at that step's end (``finish``), not at the next step's begin."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", USER_PROFILER_IN_OUR_WINDOW, str(tmp_path), str(theirs)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    (warned,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("WARNINGS")]
    assert warned.startswith("WARNINGS 1 ") and "another torch.profiler was started and stopped" in warned
    assert "window (steps 3-5)" in warned
    assert "EXPORTED 0 PROFILER_ON False" in proc.stdout

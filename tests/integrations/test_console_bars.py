"""Our console lines never share a line with a progress bar.

A transformers run with its tqdm bar on, stdout and stderr merged into one pipe as a terminal shows them; a window's
line is printed while the bar is on screen (a callback waits for it at step 8). What a terminal shows of a line is
what follows its last carriage return: each of our lines must start there with ``perf-callbacks``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]

RUN = textwrap.dedent("""
    import sys
    from pathlib import Path
    from transformers import TrainerCallback
    from perf_callbacks import TransformersPerfCallback
    from tests.integrations.hf_helpers import make_trainer

    cb = TransformersPerfCallback(output_dir=sys.argv[1] + "/perf", check_dataloaders=False, degradation_threshold=1e6,
                                  schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 2, "repeat": 1})

    class WaitForTheSummary(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 8:
                cb.engine.windows.wait(240)  # the summary is printed here, with the bar on screen
                assert cb.engine.windows.handoff.summaries, "no summary by step 8"

    make_trainer(Path(sys.argv[1]), [cb, WaitForTheSummary()], max_steps=12, disable_tqdm=False).train()
""")


@pytest.mark.slow
def test_a_window_summary_under_a_transformers_tqdm_bar_starts_its_own_lines(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", RUN, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env, cwd=ROOT, timeout=400, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    text = proc.stdout
    ours = [line for line in text.split("\n") if "perf-callbacks" in line]
    assert len(ours) == 2, text[-3000:]  # one window, one line; the ledger's line at the end
    assert "perf-callbacks: steps 3-4 " in ours[0] and "goodput" in ours[1], ours
    assert "12/12" in text[text.index("perf-callbacks: steps 3-4 "):]  # the bar went on after the summary
    shown = [line.split("\r")[-1] for line in ours]
    assert all(line.startswith("perf-callbacks") for line in shown), [s for s in shown if not s.startswith("perf")]

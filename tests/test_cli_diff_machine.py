"""``perf-callbacks diff`` over whole runs: one run on a loaded core and the same on a quiet one is the machine.

Two runs of the Lightning example with the same settings, each pinned to one core: the first with two CPU burners on
that core, all at normal priority (the training gets about a third of it); the second alone there at a raised
priority (``nice -10``), so that the other processes of this shared machine take little of its core. Needs the
right to raise a priority (root); skipped without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from perf_callbacks.cli import main

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "lightning" / "train.py"
CORE = min(os.sched_getaffinity(0))


def _pinned(nice: int) -> Callable[[], None]:
    def setup() -> None:
        os.sched_setaffinity(0, {CORE})
        os.nice(nice)

    return setup


def _can_raise_priority() -> bool:
    done = subprocess.run([sys.executable, "-c", "import os; os.nice(-10)"], capture_output=True, check=False)
    return done.returncode == 0


def _train(root: Path, config: Path, nice: int) -> None:
    cmd = [sys.executable, str(EXAMPLE), "--max-steps", "60", "--num-workers", "0", "--batch-size", "16",
           "--config", str(config), "--root", str(root)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=_pinned(nice), timeout=400,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.skipif(not _can_raise_priority(), reason="raising a process's priority is not allowed here")
def test_a_run_on_a_loaded_core_against_itself_on_a_quiet_one_says_the_machine_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "perf.yaml"
    config.write_text("schedule: {skip_first: 100000}\nsummary: false\n")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_pinned(0))
               for _ in range(2)]
    try:
        _train(tmp_path / "loaded", config, 0)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    _train(tmp_path / "quiet", config, -10)
    assert main(["diff", str(tmp_path / "loaded"), str(tmp_path / "quiet"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    contention = next(x for x in d["machine"] if x["what"] == "cpu_contention")
    assert contention["base"] > contention["new"] + 0.1, d["machine"]
    assert d["machine_differs"] and d["call"] != "improvement" and d["withheld"] == (d["ci_high"] < -d["threshold"])
    with contextlib.suppress(Exception):
        capsys.readouterr()
    assert main(["diff", str(tmp_path / "loaded"), str(tmp_path / "quiet")]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[3].startswith("the runs differ besides the change: CPU contention ")

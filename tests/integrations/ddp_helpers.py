"""The 2-process DDP fit of ``ddp_fit.py``, launched in a subprocess, and the result each rank wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def launch(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "tests.integrations.ddp_fit", str(tmp_path), *flags], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)


def run_ddp(tmp_path: Path, *flags: str) -> list[dict]:
    proc = launch(tmp_path, *flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((tmp_path / f"result-rank{r}.json").read_text()) for r in (0, 1)]

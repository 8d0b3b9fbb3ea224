"""``tools/screenshots.py`` photographs the report pages of the docs: seven PNGs, each a real picture, not a blank."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
NAMES = ("report_compute_bound", "report_input_bound", "report_launch_bound_tiny_kernels", "report_sync_bound",
         "report_run_3_windows", "report_gloo_2_ranks", "diff_compute_vs_input")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium package")
def test_the_script_writes_every_screenshot_of_the_docs(tmp_path: Path, gloo_window: Path) -> None:
    out = tmp_path / "img"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "screenshots.py"), str(out), "--gloo", str(gloo_window)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(p.stem for p in out.glob("*.png")) == sorted(NAMES)
    for name in NAMES:
        data = (out / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", data[16:24])
        assert (width, height) == (1040, 2300)
        assert len(data) > 60_000, name  # a blank page of that size compresses to a few kB
    docs = (REPO / "docs" / "html-report.md").read_text()
    assert all(f"img/{name}.png" in docs for name in NAMES)  # each picture is shown in the docs

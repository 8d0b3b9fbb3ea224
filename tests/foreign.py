"""Where the tests find traces other tools wrote (HTA's test traces), and the mark for the tests that read them.

Those traces are not this project's: they stay in ``../shared/fixtures/foreign_traces`` beside the repository, and a
plain clone has no such folder. A test that reads them is marked ``needs_foreign`` and skips with the reason there;
in CI a skip that is not ``gpu`` fails the run (``tests/conftest.py``), so CI, which has the folder, runs every one.
This project's own traces (the four H200 windows) live in ``tests/data/gpu_traces`` and never skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

FOREIGN_ROOT = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "foreign_traces"
HTA = FOREIGN_ROOT / "hta"
needs_foreign = pytest.mark.skipif(not HTA.is_dir(), reason=f"HTA's traces are not at {HTA} (a plain clone has none)")

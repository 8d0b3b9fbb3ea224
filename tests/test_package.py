from __future__ import annotations

import subprocess
import sys

import perf_callbacks


def test_import_loads_no_framework() -> None:
    code = "import sys, perf_callbacks; print(sorted(m for m in ('lightning', 'accelerate', 'pytorch_lightning') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_all_matches_exports() -> None:
    for name in perf_callbacks.__all__:
        assert getattr(perf_callbacks, name) is not None, name
    public = {n for n in dir(perf_callbacks) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(perf_callbacks.__all__)
    assert perf_callbacks.GPUPerfCallback.__module__ == "perf_callbacks.integrations.lightning"

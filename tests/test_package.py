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


def test_every_warning_goes_through_core_warn() -> None:
    # core/warn.py adds the "perf-callbacks: " prefix and points the warning at the user's line; a bare
    # warnings.warn elsewhere skips both (three did: the NVTX, per-module NVTX and transformers fallbacks)
    import ast
    from pathlib import Path

    root = Path(perf_callbacks.__file__).parent
    bare = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warn"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "warnings"):
                bare.append(f"{path.relative_to(root)}:{node.lineno}")
    assert bare and [b for b in bare if not b.startswith("core/warn.py:")] == []


def test_ci_oldest_releases_are_pyprojects_floors() -> None:
    # .ci/run tests again with .ci/oldest.txt installed; a floor raised in one file and not the other would let pip
    # resolve an untested release, so every runtime floor but torch's (CI has only the local 2.13 CPU wheel) is there
    import re
    from pathlib import Path

    from packaging.requirements import Requirement
    from packaging.version import Version

    repo = Path(__file__).resolve().parents[1]
    text = (repo / "pyproject.toml").read_text()
    runtime = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    extras = [re.search(rf"^{name} = \[(.*)\]$", text, re.M) for name in ("accelerate", "transformers", "cli")]
    floors: dict[str, Version] = {}
    for block in [runtime, *extras]:
        assert block is not None
        for spec in re.findall(r'"([^"]+)"', block.group(1)):
            req = Requirement(spec)
            (floor,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
            floors[req.name.lower()] = floor
    oldest = {}
    for line in (repo / ".ci" / "oldest.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (pin,) = [Version(s.version) for s in req.specifier if s.operator == "=="]
            oldest[req.name.lower()] = pin
    assert floors.pop("torch") == Version("2.4")
    assert oldest == floors

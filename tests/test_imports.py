"""The package's import graph: no cycle, no import up the layers (``tools/imports.py``, documented in
``docs/architecture.md``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("imports_tool", REPO / "tools" / "imports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_has_no_import_cycle_and_no_upward_import() -> None:
    done = subprocess.run([sys.executable, "tools/imports.py"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 cycles, 0 upward imports" in done.stdout


def write(root: Path, name: str, text: str) -> None:
    path = root.joinpath(*name.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_tool_finds_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    """A cycle seen only by type checkers counts; so does a function-level import from core up to the adapters."""
    tool = load_tool()
    root = tmp_path / "perf_callbacks"
    for pkg in ("perf_callbacks", "perf_callbacks.core", "perf_callbacks.integrations"):
        write(tmp_path, f"{pkg}.__init__", "")
    write(tmp_path, "perf_callbacks.core.a", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
          "    from perf_callbacks.core.b import B\n")
    write(tmp_path, "perf_callbacks.core.b", "from perf_callbacks.core import a\n"
          "def f():\n    from perf_callbacks.integrations.x import y\n")
    write(tmp_path, "perf_callbacks.integrations.x", "from .. import core\n")
    graph = tool.graph(root)
    assert graph["perf_callbacks.core.a"] == {"perf_callbacks.core.b"}
    assert tool.cycles(graph) == [["perf_callbacks.core.a", "perf_callbacks.core.b"]]
    assert tool.upward(graph) == [("perf_callbacks.core.b", "perf_callbacks.integrations.x")]
    assert graph["perf_callbacks.integrations.x"] == {"perf_callbacks.core.__init__"}  # relative, downward

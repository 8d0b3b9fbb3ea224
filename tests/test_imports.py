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


def test_the_package_has_no_import_cycle_no_upward_import_no_crowded_folder_and_no_long_module() -> None:
    done = subprocess.run([sys.executable, "tools/imports.py"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 cycles, 0 upward imports, 0 shape problems, 0 modules over 300 lines" in done.stdout


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


def test_every_module_named_in_one_from_import_counts(tmp_path: Path) -> None:
    """``from pkg import a, b`` imports both modules: an import up the layers hidden behind a sibling is still found."""
    tool = load_tool()
    for pkg in ("perf_callbacks", "perf_callbacks.core", "perf_callbacks.integrations"):
        write(tmp_path, f"{pkg}.__init__", "")
    write(tmp_path, "perf_callbacks.core.a", "")
    write(tmp_path, "perf_callbacks.integrations.x", "")
    write(tmp_path, "perf_callbacks.core.b", "from perf_callbacks.core import a, clock\n"
          "from perf_callbacks import core, integrations\n")
    write(tmp_path, "perf_callbacks.core.clock", "X = 1\n")
    write(tmp_path, "perf_callbacks.core.c", "from perf_callbacks.core import a, X\n")
    graph = tool.graph(tmp_path / "perf_callbacks")
    assert graph["perf_callbacks.core.b"] == {"perf_callbacks.core.a", "perf_callbacks.core.clock",
                                              "perf_callbacks.core.__init__", "perf_callbacks.integrations.__init__"}
    assert tool.upward(graph) == [("perf_callbacks.core.b", "perf_callbacks.integrations.__init__")]
    # a name that is not a module comes from the package itself
    assert graph["perf_callbacks.core.c"] == {"perf_callbacks.core.a", "perf_callbacks.core.__init__"}


def test_the_shape_check_finds_a_crowded_folder_and_a_family_that_does_not_say_what_it_holds(tmp_path: Path) -> None:
    tool = load_tool()
    root = tmp_path / "perf_callbacks"
    write(tmp_path, "perf_callbacks.__init__", '"""The package."""\n')
    write(tmp_path, "perf_callbacks.core.__init__", '"""The core."""\n')
    for i in range(tool.MAX_MODULES):
        write(tmp_path, f"perf_callbacks.core.m{i}", "")
    write(tmp_path, "perf_callbacks.core.timing.__init__", "")
    write(tmp_path, "perf_callbacks.core.timing.stats", "\n" * (tool.LONG_LINES + 1))
    assert tool.shape(root) == (["perf_callbacks/core/timing: no __init__.py saying what the family holds"],
                                [f"perf_callbacks/core/timing/stats.py: {tool.LONG_LINES + 1} lines"])
    write(tmp_path, "perf_callbacks.core.one_more", "")
    problems, _ = tool.shape(root)
    assert f"perf_callbacks/core: {tool.MAX_MODULES + 1} modules (at most {tool.MAX_MODULES})" in problems

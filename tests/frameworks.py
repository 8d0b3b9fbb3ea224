"""Which test modules touch the releases ``.ci/oldest.txt`` pins: they get the ``frameworks`` mark.

``.ci/run`` runs the whole suite on the newest releases, then only the tests marked ``frameworks`` on the oldest
ones: a test that reads traces, sidecars or fed numbers runs the same code whatever Lightning, Accelerate or
transformers is installed, so running it twice buys nothing. A test module is framework-free when it lives in
``tests/analysis`` (or is one of :data:`FREE_FILES`) and neither it nor a ``tests`` helper it imports (followed
through their imports) names a pinned package, the adapters or the engine (which drives NVTX and TensorBoard).
Every other test is marked, so a new test is in both passes unless it is known to be free.

Example:
    >>> touches_frameworks(Path(__file__).parent / "analysis" / "judge" / "test_noise.py")
    False
    >>> touches_frameworks(Path(__file__).parent / "analysis" / "html" / "test_run_page.py")  # trains an engine
    True
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

TESTS = Path(__file__).resolve().parent
FREE_DIRS = ("analysis",)
FREE_FILES = ("test_cli_errors.py", "test_cli_report.py", "test_cli_report_remote.py", "test_imports.py",
              "test_ci_skips.py")
PINNED = ("lightning", "pytorch_lightning", "accelerate", "transformers", "tensorboard", "nvtx", "jsonargparse")
DRIVERS = ("perf_callbacks.integrations", "perf_callbacks.core.engine", "tests.integrations",
           "tests.core.engine_helpers")


def touches_frameworks(path: Path, tests: Path = TESTS) -> bool:
    """Whether the test module at ``path`` (in the ``tests`` folder ``tests``) is to run on the oldest releases too."""
    path, tests = path.resolve(), tests.resolve()
    rel = path.relative_to(tests) if path.is_relative_to(tests) else None
    if rel is None or not (rel.parts[0] in FREE_DIRS or (len(rel.parts) == 1 and rel.name in FREE_FILES)):
        return True
    return _reaches(str(path), tests.parent, frozenset())


def _reaches(path: str, root: Path, seen: frozenset[str]) -> bool:
    """``path`` or a ``tests`` module it imports names a pinned package or a driver."""
    for name in _imports(path):
        if name.split(".")[0] in PINNED or any(name == d or name.startswith(d + ".") for d in DRIVERS):
            return True
        helper = _tests_module(name, root)
        if helper is not None and helper not in seen and _reaches(helper, root, seen | {path}):
            return True
    return False


@functools.cache
def _imports(path: str) -> tuple[str, ...]:
    """Every module name imported anywhere in the file (functions included), with ``from X import Y`` as X.Y too."""
    names: list[str] = []
    for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return tuple(names)


def _tests_module(name: str, root: Path) -> str | None:
    """The file of a ``tests.`` module name (or of its longest importable prefix), if there is one."""
    parts = name.split(".")
    if parts[0] != "tests":
        return None
    for end in range(len(parts), 1, -1):
        base = root.joinpath(*parts[:end])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return str(candidate)
    return None

"""The package's import graph: fails on an import cycle or on an import that runs up the layers.

Every ``import perf_callbacks...`` counts, wherever it is (module level, inside a function, under ``TYPE_CHECKING``):
a cycle that only type checkers see is still two modules that cannot be read apart. The layers, from the top:

    cli (its subcommands and remote reads), integrations
    core: engine -> hang -> windows -> triggers -> timing -> memory -> ranges -> flops -> files -> core's base
    config
    analysis: the package and its sidecar entry point -> html -> render -> windows -> diff, ledger -> rank -> compute
              -> measures -> memory -> judge -> results -> trace
    exceptions and the private helpers

A module may import from its own layer (without a cycle) or from a layer below it, never from one above. Each family
is a subpackage whose ``__init__`` says in one line what it holds, no folder holds more than ``MAX_MODULES``
modules, and no module is longer than ``LONG_LINES`` lines.

Usage::

    python tools/imports.py            # prints the cycles and upward imports; exit 1 if there is any
    python tools/imports.py --graph    # also prints every edge
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "perf_callbacks"
LAYERS = (
    ("perf_callbacks.cli", "perf_callbacks.integrations", "perf_callbacks.__init__"),
    ("perf_callbacks.core.engine",),
    ("perf_callbacks.core.hang",),
    ("perf_callbacks.core.windows",),
    ("perf_callbacks.core.triggers",),
    ("perf_callbacks.core.timing",),
    ("perf_callbacks.core.memory",),
    ("perf_callbacks.core.ranges",),
    ("perf_callbacks.core.flops",),
    ("perf_callbacks.core.files",),
    ("perf_callbacks.core",),
    ("perf_callbacks.config", "perf_callbacks._config_checks"),
    ("perf_callbacks.analysis.__init__", "perf_callbacks.analysis.sidecar"),
    ("perf_callbacks.analysis.html",),
    ("perf_callbacks.analysis.render",),
    ("perf_callbacks.analysis.windows",),
    ("perf_callbacks.analysis.diff", "perf_callbacks.analysis.ledger"),
    ("perf_callbacks.analysis.rank",),
    ("perf_callbacks.analysis.compute",),
    ("perf_callbacks.analysis.measures",),
    ("perf_callbacks.analysis.memory",),
    ("perf_callbacks.analysis.judge",),
    ("perf_callbacks.analysis.results",),
    ("perf_callbacks.analysis.trace",),
    ("perf_callbacks.analysis", "perf_callbacks.exceptions", "perf_callbacks._errors", "perf_callbacks._yaml"),
)
"""Top first; a module belongs to the first prefix it starts with."""
MAX_MODULES = 12
"""The most modules a folder of the package may hold (``__init__`` and ``__main__`` not counted)."""
LONG_LINES = 300
"""The most lines a module may have: a longer one is split along its seams."""


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted name -> file, of every module of the package (``__init__`` named ``pkg.__init__``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports (``from pkg import mod`` resolves to the module when it is one)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name.rsplit(".", 1)[0] if not name.endswith(".__init__") else name[: -len(".__init__")]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            hits = {_resolve(alias.name, known) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            hits = {_resolve(f"{base}.{alias.name}", known) for alias in node.names}
            if None in hits:  # a name that is not a module: it comes from ``base`` itself
                hits.add(_resolve(base, known))
        else:
            continue
        found |= {hit for hit in hits if hit is not None and hit != name}
    return found


def _resolve(target: str, known: set[str]) -> str | None:
    if target in known:
        return target
    if f"{target}.__init__" in known:
        return f"{target}.__init__"
    return None


def layer(name: str) -> int:
    """The layer index of ``name`` (0: top)."""
    for i, prefixes in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return i
    return len(LAYERS)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a module to one in a layer above it."""
    return sorted((a, b) for a, deps in graph.items() for b in deps if layer(b) < layer(a))


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    mods = modules(root)
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}


def shape(root: Path = PACKAGE) -> tuple[list[str], list[str]]:
    """Problems of the package's shape, and the modules over ``LONG_LINES`` lines.

    A problem is a folder of more than ``MAX_MODULES`` modules, or a subpackage that does not say what it holds.
    """
    problems: list[str] = []
    for folder in sorted({p.parent for p in root.rglob("*.py")}):
        mods = [p for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")]
        rel = folder.relative_to(root.parent).as_posix()
        if len(mods) > MAX_MODULES:
            problems.append(f"{rel}: {len(mods)} modules (at most {MAX_MODULES})")
        init = folder / "__init__.py"
        if not init.exists() or not ast.get_docstring(ast.parse(init.read_text())):
            problems.append(f"{rel}: no __init__.py saying what the family holds")
    long = [f"{p.relative_to(root.parent).as_posix()}: {n} lines" for p in sorted(root.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > LONG_LINES]
    return problems, long


def main(argv: list[str] | None = None) -> int:
    """Print the cycles, upward imports, shape problems and long modules; 1 if there is any."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", action="store_true", help="print every edge too")
    args = parser.parse_args(argv)
    g = graph()
    if args.graph:
        for a in sorted(g):
            for b in sorted(g[a]):
                print(f"{a} -> {b}")
    found = cycles(g)
    up = upward(g)
    for comp in found:
        print("cycle: " + " <-> ".join(comp))
    for a, b in up:
        print(f"upward: {a} -> {b}")
    problems, long = shape()
    for line in problems:
        print(f"shape: {line}")
    for line in long:
        print(f"long: {line}")
    print(f"{len(g)} modules, {sum(map(len, g.values()))} imports, {len(found)} cycles, {len(up)} upward imports, "
          f"{len(problems)} shape problems, {len(long)} modules over {LONG_LINES} lines")
    return 1 if found or up or problems or long else 0


if __name__ == "__main__":
    sys.exit(main())

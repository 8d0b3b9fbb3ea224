"""The package's import graph: fails on an import cycle or on an import that runs up the layers.

Every ``import perf_callbacks...`` counts, wherever it is (module level, inside a function, under ``TYPE_CHECKING``):
a cycle that only type checkers see is still two modules that cannot be read apart. The layers, from the top:

    cli (and its remote reads), integrations  ->  core  ->  config  ->  analysis, exceptions and the private helpers

A module may import from its own layer (without a cycle) or from a layer below it, never from one above.

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
    ("perf_callbacks.cli", "perf_callbacks.cli_capture", "perf_callbacks.remote_read", "perf_callbacks.integrations",
     "perf_callbacks.__init__"),
    ("perf_callbacks.core",),
    ("perf_callbacks.config",),
    ("perf_callbacks.analysis", "perf_callbacks.exceptions", "perf_callbacks._errors", "perf_callbacks._yaml"),
)
"""Top first; a module belongs to the first prefix it starts with."""


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
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            hit = _resolve(target, known)
            if hit is not None and hit != name:
                found.add(hit)
                break
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


def main(argv: list[str] | None = None) -> int:
    """Print the cycles and upward imports; 1 if there is any."""
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
    print(f"{len(g)} modules, {sum(map(len, g.values()))} imports, {len(found)} cycles, {len(up)} upward imports")
    return 1 if found or up else 0


if __name__ == "__main__":
    sys.exit(main())

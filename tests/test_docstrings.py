"""The examples in the package's docstrings run and give what they show (``doctest``), so they cannot rot."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

import perf_callbacks


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(perf_callbacks.__path__, "perf_callbacks."))


def _tests(module: ModuleType) -> list[doctest.DocTest]:
    """The module's own examples (not those of names it imports)."""
    return [t for t in doctest.DocTestFinder().find(module, module=module) if t.examples]


def _examples(module: ModuleType) -> int:
    """How many examples run (those marked ``+SKIP``, which need a real run's files, do not)."""
    return sum(not e.options.get(doctest.SKIP) for t in _tests(module) for e in t.examples)


@pytest.mark.parametrize("name", [m for m in _modules() if _examples(importlib.import_module(m))])
def test_docstring_examples_run(name: str) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in _tests(importlib.import_module(name)):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"{name}: {result.failed} of {result.attempted} failed"


def test_the_package_has_examples() -> None:
    assert sum(_examples(importlib.import_module(m)) for m in _modules()) >= 40

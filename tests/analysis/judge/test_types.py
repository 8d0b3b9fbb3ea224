"""Verdicts and copy kinds are types: every value the judge or the copy advice can give is one of its ``Literal``'s.

A new verdict string (or pageable copy kind) added to the code without its ``Literal`` fails here, whether it is
given (``VERDICT_OF``, a return) or only compared against (``r.verdict == "..."``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import perf_callbacks
from perf_callbacks.analysis import VERDICTS
from perf_callbacks.analysis.judge.verdict import VERDICT_OF, verdict_from, verdict_margin
from perf_callbacks.analysis.measures import copies
from perf_callbacks.analysis.results.parts import Measures
from perf_callbacks.analysis.results.recommendation import PAGEABLE_COPIES, PageableCopy
from perf_callbacks.analysis.results.verdicts import Verdict
from tests.analysis.result_helpers import rank

PACKAGE = Path(perf_callbacks.__file__).parent


def test_every_verdict_the_judge_gives_is_a_verdict() -> None:
    given = {verdict_from({})} | {verdict_from({cause: share}) for cause in VERDICT_OF for share in (0.05, 0.5)}
    runners = {verdict_margin({cause: share, "input": 0.2}).runner_up for cause in VERDICT_OF for share in (0.05, 0.5)}
    assert given == set(get_args(Verdict)) == set(VERDICTS)
    assert runners <= set(VERDICTS)
    assert VERDICTS[0] == "compute_bound"  # the default of a rank result, and of a sidecar without one
    for cause in VERDICT_OF:
        assert rank(losses={cause: 0.5}).verdict in VERDICTS


def _is_verdict(node: ast.expr) -> bool:
    """``verdict``, ``r.verdict``, ``x["verdict"]``, ``x.get("verdict")``."""
    if isinstance(node, ast.Name):
        return node.id.endswith("verdict")
    if isinstance(node, ast.Attribute):
        return node.attr.endswith("verdict")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "verdict"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "verdict"
    return False


def _strings(node: ast.expr | None) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return []


def verdict_strings(tree: ast.AST) -> list[str]:
    """The strings the code compares a verdict with, gives one, or returns from a function typed ``Verdict``."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_verdict(s) for s in sides):
                found += [s for side in sides for s in _strings(side)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_is_verdict(t) for t in targets):
                found += _strings(node.value)
        elif isinstance(node, ast.keyword) and node.arg in ("verdict", "runner_up"):
            found += _strings(node.value)
        elif isinstance(node, ast.FunctionDef) and node.returns is not None and "Verdict" in ast.unparse(node.returns):
            found += [s for r in ast.walk(node) if isinstance(r, ast.Return) for s in _strings(r.value)]
    return found


def test_every_verdict_string_in_the_code_is_a_verdict() -> None:
    found = {(path.relative_to(PACKAGE).as_posix(), s) for path in PACKAGE.rglob("*.py")
             for s in verdict_strings(ast.parse(path.read_text()))}
    assert {s for _, s in found} >= {"compute_bound", "sync_bound", "input_bound"}  # the scan sees them
    assert [(p, s) for p, s in sorted(found) if s not in VERDICTS] == []


def test_the_scan_catches_a_verdict_missing_from_the_literal() -> None:
    code = 'def judge(r) -> Verdict:\n    return "memory_bound" if r.x else "compute_bound"\n' \
           'if r.verdict in ("disk_bound",): pass\nr.verdict = "net_bound"\nf(verdict="gpu_bound")\n'
    assert sorted(s for s in verdict_strings(ast.parse(code)) if s not in VERDICTS) == [
        "disk_bound", "gpu_bound", "memory_bound", "net_bound"]


def test_every_copy_kind_the_copy_advice_gives_is_a_pageable_copy() -> None:
    assert {f"{direction}/pageable" for direction in copies._FIX} == set(PAGEABLE_COPIES) == set(
        get_args(PageableCopy))
    rows = [{"kind": d, "memory": m, "count": 1, "bytes": 1_000_000, "total_ms": 1.0, "gbps": g}
            for d in ("HtoD", "DtoH", "DtoD", "PtoP") for m, g in (("pageable", 1.0), ("pinned", 25.0),
                                                                    ("device", 1.0), ("host", 1.0))]
    exposed = {f"{row['kind']}/{row['memory']}": 20.0 for row in rows}
    r = rank(span_ms=100.0, measures=Measures(copies=rows), copy_exposed_ms=exposed)
    assert {kind for kind, _, _ in copies.copy_advice(r)} == set(PAGEABLE_COPIES)


def test_the_copy_recommendation_names_its_pageable_kinds() -> None:
    exposed = {"DtoD/device": 2.0, "HtoD/pageable": 10.0, "DtoH/pageable": 0.5, "DtoH/pinned": 5.0}
    rec = rank(losses={"copy": 0.3}, copy_exposed_ms=exposed).recommendations[0]
    assert (rec.cause, rec.copy_kinds) == ("copy", ("HtoD/pageable",))  # DtoH/pageable: under a tenth, not named
    both = rank(losses={"copy": 0.3}, copies_ms={"DtoH/pageable": 3.0, "HtoD/pageable": 4.0}).recommendations[0]
    assert both.copy_kinds == PAGEABLE_COPIES
    assert rank(losses={"copy": 0.3}, copies_ms={"DtoD/device": 3.0}).recommendations[0].copy_kinds == ()
    assert all(x.copy_kinds == () for x in rank(losses={"sync": 0.3, "copy": 0.06},
                                                 copies_ms={"HtoD/pageable": 1.0}).recommendations if x.cause != "copy")

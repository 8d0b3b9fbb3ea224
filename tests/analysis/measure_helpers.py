"""The fixtures the measure tests read, each analysed once, and their raw events (``measure_truth`` counts them)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import AnalysisResult, analyze
from tests.analysis import measure_truth as truth
from tests.analysis.conftest import DATA
from tests.foreign import HTA

NCCL = HTA / "nccl_parser_config" / "nccl_data.json.gz"  # HTA's: tests that read it are marked needs_foreign
H200 = DATA  # this project's own four H200 windows, in the repository
SCENARIOS = ("compute_bound", "input_bound", "launch_bound_tiny_kernels", "sync_bound")
REL = 0.01


def h200(name: str) -> Path:
    return H200 / f"{name}.pt.trace.json.gz"


def approx(value: float) -> Any:
    return pytest.approx(value, rel=REL)


@cache
def analyzed(path: Path) -> AnalysisResult:
    """Each fixture parsed once per session (the tests only read the result)."""
    return analyze(path, sidecars=False)


@cache
def raw(path: Path) -> list[dict[str, Any]]:
    return truth.events(path)

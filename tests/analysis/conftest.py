from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parents[1] / "data" / "gpu_traces"
README_BUSY = {"compute_bound": 0.993, "input_bound": 0.001, "launch_bound_tiny_kernels": 0.024, "sync_bound": 0.713}


def fixture_trace(name: str) -> Path:
    return DATA / f"{name}.pt.trace.json.gz"


def write_trace(path: Path, events: list[dict[str, Any]], **meta: Any) -> Path:
    """Writes a Kineto-shaped trace; ``.gz`` names are gzipped."""
    doc = {"schemaVersion": 1, **meta, "traceEvents": events}
    text = json.dumps(doc, indent=2)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def kernel(ts: float, dur: float, corr: int, name: str = "gemm") -> dict[str, Any]:
    return x("kernel", name, ts, dur, device=0, stream=7, correlation=corr)


def launch(ts: float, corr: int) -> dict[str, Any]:
    return x("cuda_runtime", "cudaLaunchKernel", ts, 5.0, correlation=corr)


@pytest.fixture(scope="session")
def gloo_window(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real 2-rank gloo CPU traces; rank 1 sleeps 50 ms before its all_reduce each step."""
    from tests.analysis.gloo_traces import write_traces

    return write_traces(tmp_path_factory.mktemp("gloo") / "window-000002-000004")

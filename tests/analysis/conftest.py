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
    """Real 2-rank gloo CPU traces of 20 steps; rank 1 sleeps 100 ms before its all_reduce each step.

    20 steps, not 8: on a loaded machine a step of either rank may stall for most of a second (885 ms was seen at a
    load of 13 on 2 cores), beyond any delay a test can plant; 2 or 3 such steps of the fast rank among 8 left the rank
    test short of significance ("no straggler"), among 20 they do not.
    """
    from tests.analysis.gloo_traces import write_traces

    return write_traces(tmp_path_factory.mktemp("gloo") / "window-000002-000021", active=20)


@pytest.fixture(scope="session")
def gloo_healthy_window(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real 2-rank gloo CPU traces of 20 steps where no rank is slowed (only the machine's load makes noise)."""
    from tests.analysis.gloo_traces import write_traces

    return write_traces(tmp_path_factory.mktemp("gloo_healthy") / "window-000002-000021", sleep_s=0.0, active=20)


def load_doc(name: str) -> dict[str, Any]:
    """The parsed JSON of a fixture trace, to be changed and written again with ``write_trace``."""
    with gzip.open(fixture_trace(name), "rt") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def save_doc(path: Path, doc: Any) -> Path:
    """Write a (changed) trace document, compact; ``.gz`` names are gzipped."""
    text = json.dumps(doc)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def device_busy(events: list[dict[str, Any]], device: int = 0) -> float:
    """Utilization as the fixtures README counts it, computed here without the package: union of device intervals
    over [first ProfilerStep start, max(last step end, last device op end)]."""
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    ops = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                 if e.get("cat") in DEVICE_CATS and e.get("args", {}).get("device") == device)
    lo = min(e["ts"] for e in steps)
    hi = max([e["ts"] + e["dur"] for e in steps] + [b for _, b in ops])
    busy, cur_a, cur_b = 0.0, None, None
    for a, b in ops:
        a, b = max(a, lo), min(b, hi)
        if b <= a:
            continue
        if cur_b is None or a > cur_b:
            busy += 0.0 if cur_b is None or cur_a is None else cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_a is not None and cur_b is not None:
        busy += cur_b - cur_a
    return busy / (hi - lo)


DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}

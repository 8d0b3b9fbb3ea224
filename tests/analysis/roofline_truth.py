"""An independent count of each GEMM group's FLOPs, bytes and time, straight from a trace's raw events.

It shares no code with ``perf_callbacks.analysis``: every kernel whose ``External id`` names an ``aten::mm`` /
``aten::addmm`` / ``aten::bmm`` / ``aten::baddbmm`` op (and starts at or after the first ``ProfilerStep``) is put in
that op's (name, shapes, dtype) group; each op call counts once; FLOPs are ``2 * batch * M * K * N``, bytes the
inputs and the output, each once.
"""

from __future__ import annotations

import functools
import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

SIZE = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2, "double": 8}
H200 = {"fp32": 67.0e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12}
"""NVIDIA's H200 datasheet: dense FLOP/s (the sparse figures halved) and HBM3e 4.8 TB/s."""
H200_BYTES_PER_S = 4.8e12
_SHORT = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16"}


def gemm_groups(path: Path, bytes_per_s: float = H200_BYTES_PER_S) -> dict[tuple[str, str, str], dict[str, Any]]:
    """``(op, shapes, dtype)`` -> ``{count, time_ms, flops, bytes, tflops, share}`` of the trace's GEMM groups."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    start = min(e["ts"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    groups: dict[tuple[str, str, str], dict[str, Any]] = defaultdict(lambda: {"calls": set(), "time_us": 0.0})
    costs: dict[tuple[str, str, str], tuple[int, int]] = {}
    for e in events:
        if e.get("cat") != "kernel" or e["ts"] < start:
            continue
        op = ops.get(e["args"].get("External id"))
        if op is None or op["name"] not in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"):
            continue
        dims, types = op["args"]["Input Dims"], op["args"]["Input type"]
        shapes = ", ".join(str(d) for d in dims if d)
        key = (op["name"], shapes, _SHORT[types[0]])
        g = groups[key]
        g["calls"].add(op["args"]["External id"])
        g["time_us"] += e["dur"]
        costs[key] = _cost(op["name"], dims, SIZE[types[0]])
    out = {}
    for key, g in groups.items():
        flops, nbytes = (len(g["calls"]) * c for c in costs[key])
        seconds = g["time_us"] / 1e6
        peak = H200[key[2]]
        bound = min(peak, flops / nbytes * bytes_per_s)
        out[key] = {"count": len(g["calls"]), "time_ms": g["time_us"] / 1e3, "flops": flops, "bytes": nbytes,
                    "tflops": flops / seconds / 1e12, "share": flops / seconds / bound}
    return out


@functools.cache
def analyzed(name: str) -> Any:
    """``analyze`` of a fixture trace, once per test session (the roofline and precision tests share it)."""
    from perf_callbacks.analysis import analyze
    from tests.analysis.conftest import fixture_trace

    return analyze(fixture_trace(name), sidecars=False)


def _cost(name: str, dims: list[list[int]], size: int) -> tuple[int, int]:
    bias = []
    if name in ("aten::addmm", "aten::baddbmm"):
        bias, dims = dims[0], dims[1:]
    a, b = dims[0], dims[1]
    batch = a[0] if len(a) == 3 else 1
    m, k, n = a[-2], a[-1], b[-1]
    elements = _numel(a) + _numel(b) + _numel(bias) + batch * m * n
    return 2 * batch * m * k * n, elements * size


def _numel(d: list[int]) -> int:
    out = 1
    for x in d:
        out *= x
    return out if d else 0

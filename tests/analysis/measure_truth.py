"""Independent counts of the communication, transfer, launch and memory figures, straight from a trace's raw events.

Nothing here imports perf_callbacks: each figure is a json.load and a loop, so that a test compares the package with
a second, simpler reading of the same events.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from bisect import bisect_right
from collections import Counter, defaultdict
from pathlib import Path
from statistics import median
from typing import Any

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SIZES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Byte": 1, "float": 4}
NAMES = {"allreduce": "AllReduce", "all_reduce": "AllReduce", "broadcast": "Broadcast", "allgather": "AllGather",
         "all_gather": "AllGather", "reduce_scatter": "ReduceScatter"}
FACTOR = {"AllReduce": lambda n: 2 * (n - 1) / n, "AllGather": lambda n: (n - 1) / n, "Broadcast": lambda n: 1.0}


def events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        found: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return found


def window(ev: list[dict[str, Any]]) -> tuple[float, float]:
    """First ProfilerStep start to the later of the last step end and the last device op end."""
    steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    ends = [e["ts"] + e.get("dur", 0) for e in ev if e.get("cat") in DEVICE_CATS]
    return min(e["ts"] for e in steps), max([e["ts"] + e["dur"] for e in steps] + ends)


def inside(e: dict[str, Any], lo: float, hi: float) -> bool:
    return bool(lo <= e["ts"] < hi)


def union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def length(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Parts of the merged spans ``a`` outside the merged spans ``b`` (quadratic: small inputs only)."""
    out = []
    for s, e in a:
        pieces = [(s, e)]
        for bs, be in b:
            pieces = [p for x, y in pieces for p in ((x, min(y, bs)), (max(x, be), y)) if p[1] > p[0]]
        out += pieces
    return out


def nccl_figures(ev: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per collective: count, bytes, total_ms, exposed_ms, algbw, busbw, p50 busbw, from the NCCL kernels on device 0."""
    lo, hi = window(ev)
    kernels = [e for e in ev if e.get("cat") == "kernel" and inside(e, lo, hi) and e["args"].get("device") == 0]
    compute = union([(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" not in e["name"].lower()])
    out = {}
    for name in {NAMES[e["args"]["Collective name"]] for e in kernels if "nccl" in e["name"].lower()}:
        calls = [e for e in kernels if "nccl" in e["name"].lower() and NAMES[e["args"]["Collective name"]] == name]
        n = calls[0]["args"]["Group size"]
        key = "Out msg nelems" if name == "AllGather" else "In msg nelems"
        sizes = [e["args"][key] * SIZES[e["args"]["dtype"]] for e in calls]
        us = sum(e["dur"] for e in calls)
        spans = union([(e["ts"], e["ts"] + e["dur"]) for e in calls])
        algbw = sum(sizes) / us / 1e3
        out[name] = {"count": len(calls), "bytes": sum(sizes), "total_ms": us / 1e3,
                     "exposed_ms": length(minus(spans, compute)) / 1e3, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * FACTOR[name](n), "group_size": n,
                     "busbw_p50_gbps": median(s / e["dur"] / 1e3 * FACTOR[name](n)
                                              for s, e in zip(sizes, calls, strict=True))}
    every = union([(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" in e["name"].lower()])
    out["_overlap"] = {"fraction": 1 - length(minus(every, compute)) / length(every)}
    return out


def gloo_figures(ev: list[dict[str, Any]]) -> dict[str, Any]:
    """Per collective: count, bytes (None without Input Dims), total_ms, exposed_ms (outside the DataLoader's next()),
    algbw, busbw and p50 busbw of the ``gloo:`` spans of a CPU trace (a group of 2), and the overlap share."""
    steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    spans = [e for e in ev if str(e.get("name", "")).startswith("gloo:") and inside(e, lo, hi)]
    loader = union([(e["ts"], e["ts"] + e["dur"]) for e in ev if str(e.get("name", "")).startswith(
        "enumerate(DataLoader)") and e["name"].endswith("__next__")])
    out: dict[str, Any] = {}
    for name in {NAMES[e["name"][5:]] for e in spans}:
        calls = [e for e in spans if NAMES[e["name"][5:]] == name]
        shaped = all("Input Dims" in e["args"] for e in calls)
        sizes = [math.prod(e["args"]["Input Dims"][0]) * SIZES[e["args"]["Input type"][0]] if shaped else 0
                 for e in calls]
        us = sum(e["dur"] for e in calls)
        own = union([(e["ts"], min(e["ts"] + e["dur"], hi)) for e in calls])
        algbw = sum(sizes) / us / 1e3 if shaped else None
        factor = FACTOR[name](2)
        out[name] = {"count": len(calls), "bytes": sum(sizes) if shaped else None, "total_ms": us / 1e3,
                     "exposed_ms": length(minus(own, loader)) / 1e3, "algbw_gbps": algbw,
                     "busbw_gbps": None if algbw is None else algbw * factor,
                     "busbw_p50_gbps": median(s / e["dur"] / 1e3 * factor for s, e in zip(sizes, calls, strict=True))
                     if shaped else None}
    every = union([(e["ts"], min(e["ts"] + e["dur"], hi)) for e in spans])
    out["_overlap"] = {"fraction": 1 - length(minus(every, loader)) / length(every)}
    return out


def copy_figures(ev: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (direction, host memory): count, bytes, total_ms, gbps of the memcpys in the window."""
    lo, hi = window(ev)
    acc: dict[tuple[str, str], list[Any]] = defaultdict(lambda: [0, 0, 0.0])
    for e in ev:
        if e.get("cat") != "gpu_memcpy" or not inside(e, lo, hi):
            continue
        kind = re.match(r"Memcpy (\w+)", e["name"]).group(1)  # type: ignore[union-attr]
        named = "pageable" if "Pageable" in e["name"] else "pinned" if "Pinned" in e["name"] else None
        memory = named or ("device" if kind in ("DtoD", "PtoP") else "host")  # HIP: "(Host -> Device)"
        row = acc[(kind, memory)]
        row[0] += 1
        row[1] = None if row[1] is None or "bytes" not in e["args"] else row[1] + e["args"]["bytes"]
        row[2] += e["dur"]
    return {k: {"count": c, "bytes": b, "total_ms": us / 1e3, "gbps": None if b is None else b / us / 1e3}
            for k, (c, b, us) in acc.items()}


def launch_figures(ev: list[dict[str, Any]]) -> dict[str, Any]:
    """Launch-to-start delays from the launch call's end (p50, p95 by nearest rank), the p50 of kernels that found
    the device free and the share that queued behind earlier work, launch call p50, kernels under 10 us and their
    time share."""
    lo, hi = window(ev)
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and re.search(r"Launch\w*Kernel", e["name"]) and "correlation" in e.get("args", {})}
    kernels = [e for e in ev if e.get("cat") == "kernel" and inside(e, lo, hi)]
    ended = {e["args"]["correlation"]: e["ts"] + e["dur"] for e in calls.values()}  # HTA: from the call's end
    delays = sorted(max(0.0, e["ts"] - ended[e["args"]["correlation"]])  # before the call returned: 0
                    for e in kernels if e["args"].get("correlation") in ended)
    free = []  # kernels that did not start the moment the device's earlier work ended, after their launch returned
    device_ops = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                        key=lambda e: (e["ts"], e["ts"] + e["dur"]))
    last_end: dict[Any, float] = {}
    for e in device_ops:
        dev = e["args"].get("device")
        before = last_end.get(dev, -math.inf)
        last_end[dev] = max(before, e["ts"] + e["dur"])
        corr = e["args"].get("correlation")
        queued = corr in ended and ended[corr] < before and abs(e["ts"] - before) <= 5.0
        if e["cat"] == "kernel" and inside(e, lo, hi) and corr in ended and not queued:
            free.append(max(0.0, e["ts"] - ended[corr]))
    small = [e["dur"] for e in kernels if e["dur"] < 10]
    return {"p50_us": median(delays), "p95_us": delays[math.ceil(0.95 * len(delays)) - 1],
            "idle_p50_us": median(free) if free else None, "queued_fraction": 1 - len(free) / len(delays),
            "launch_call_p50_us": median(e["dur"] for e in calls.values() if inside(e, lo, hi)),
            "small_kernels": len(small), "small_kernel_fraction": sum(small) / sum(e["dur"] for e in kernels)}


def memory_figures(ev: list[dict[str, Any]], device_type: int = 1) -> dict[str, Any]:
    """Self bytes and calls per op (each memory event charged to the innermost cpu_op around it on its thread), the
    memory events each op (or ``(outside any op)``) was charged with, the peak of Total Allocated with its op and its time from the window start (ms), and what is held at the peak: the
    allocations not yet freed (matched by address) by the op that made them, the rest allocated before the trace."""
    lo, _ = window(ev)
    ops: dict[Any, list[tuple[float, float, float, str]]] = defaultdict(list)
    calls: dict[str, int] = defaultdict(int)
    for e in ev:
        if e.get("cat") == "cpu_op":
            ops[e.get("tid")].append((e["ts"], -(e["ts"] + e.get("dur", 0)), e["ts"] + e.get("dur", 0), e["name"]))
            calls[e["name"]] += 1
    for lst in ops.values():
        lst.sort()
    starts = {tid: [o[0] for o in lst] for tid, lst in ops.items()}
    reach = {tid: _prefix_max(lst) for tid, lst in ops.items()}
    mem = sorted((e for e in ev if e.get("name") == "[memory]" and e["args"].get("Device Type") == device_type),
                 key=lambda e: e["ts"])
    self_bytes: dict[str, int] = defaultdict(int)
    owners = []
    for m in mem:
        lst, ts = ops.get(m.get("tid"), []), m["ts"]
        i = bisect_right(starts.get(m.get("tid"), []), ts) - 1
        while i >= 0 and lst[i][2] <= ts:  # the latest-starting op still open at ts is the innermost
            i = i - 1 if reach[m.get("tid")][i] > ts else -1  # no op up to i is open at ts: none contains it
        owner = lst[i][3] if i >= 0 else "(outside any op)"
        owners.append(owner)
        self_bytes[owner] += m["args"]["Bytes"]
    top = max(range(len(mem)), key=lambda j: (mem[j]["args"]["Total Allocated"], -j))
    alive: dict[int, tuple[int, str]] = {}  # address -> (bytes, allocating op), up to the peak's event
    for m, owner in zip(mem[: top + 1], owners[: top + 1], strict=True):
        if m["args"]["Bytes"] > 0:
            alive[m["args"]["Addr"]] = (m["args"]["Bytes"], owner)
        else:
            alive.pop(m["args"]["Addr"], None)
    held: dict[str, int] = defaultdict(int)
    for nbytes, owner in alive.values():
        held[owner] += nbytes
    held["(allocated before the trace)"] = mem[top]["args"]["Total Allocated"] - sum(held.values())
    return {"self_bytes": dict(self_bytes), "calls": dict(calls), "events": dict(Counter(owners)),
            "peak": {"bytes": mem[top]["args"]["Total Allocated"], "op": owners[top],
                     "ts_ms": (mem[top]["ts"] - lo) / 1e3},
            "held": {k: v for k, v in held.items() if v > 0}}


def _prefix_max(lst: list[tuple[float, float, float, str]]) -> list[float]:
    out, best = [], -math.inf
    for o in lst:
        best = max(best, o[2])
        out.append(best)
    return out


ANNOTATED = {"all_to_all": "AllToAll", "all_reduce": "AllReduce", "_reduce_scatter_base": "ReduceScatter",
             "_all_gather_base": "AllGather"}
C_SIZES = {"float": 4, "long": 8, "int": 4, "unsigned char": 1, "signed char": 1}


def annotated_nccl_figures(ev: list[dict[str, Any]], device: int) -> dict[str, dict[str, Any]]:
    """Per collective of an older torch's NCCL kernels (no collective arguments): count, bytes, total_ms and algbw.

    Each kernel's launch call (same correlation) lies inside one ``nccl:<collective>`` annotation on its thread: the
    annotation names the collective and sizes it by its one input tensor (AllGather: by the output tensor, the first
    ``Input Dims`` entry, of the ``c10d::_allgather_base_`` op around the launch; no size without one, as the group size
    is not in these traces). A kernel whose launch no annotation holds keeps its kernel's name and has no size."""
    lo, hi = window(ev)
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]}
    notes = [e for e in ev if str(e.get("name", "")).startswith("nccl:")]
    bases = [e for e in ev if e.get("name") == "c10d::_allgather_base_" and "Input Dims" in e.get("args", {})]
    rows: dict[str, list[tuple[float, int | None]]] = defaultdict(list)
    for k in ev:
        if k.get("cat") != "kernel" or "nccl" not in k["name"].lower() or k["args"].get("device") != device:
            continue
        if not inside(k, lo, hi):
            continue
        call = calls.get(k["args"].get("correlation"))
        held = [a for a in notes if call is not None and a["tid"] == call["tid"]
                and a["ts"] <= call["ts"] <= a["ts"] + a["dur"]]
        if not held:
            rows[re.search(r"ncclKernel_([A-Za-z]+)", k["name"]).group(1)].append((k["dur"], None))  # type: ignore[union-attr]
            continue
        name = ANNOTATED[held[0]["name"][5:]]
        dims, kind = held[0]["args"]["Input Dims"][0], held[0]["args"]["Input type"][0]
        if name == "AllGather":
            base = [b for b in bases if b["tid"] == call["tid"] and b["ts"] <= call["ts"] <= b["ts"] + b["dur"]]
            dims, kind = (base[0]["args"]["Input Dims"][0], base[0]["args"]["Input type"][0]) if base else ([], "")
        rows[name].append((k["dur"], math.prod(dims) * C_SIZES[kind] if kind else None))
    out = {}
    for name, got in rows.items():
        sized = None if any(b is None for _, b in got) else sum(b for _, b in got if b is not None)
        us = sum(d for d, _ in got)
        out[name] = {"count": len(got), "bytes": sized, "total_ms": us / 1e3,
                     "algbw_gbps": None if sized is None else sized / us / 1e3}
    return out


def op_calls(memory: dict[str, Any], name: str) -> int:
    """What memory by op counts as ``calls`` for ``name`` in ``memory_figures``' result: the op's calls; for the
    events outside any op, how many there are."""
    return int(memory["events"][name] if name == "(outside any op)" else memory["calls"][name])

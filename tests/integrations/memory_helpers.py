"""What the memory-by-category tests compute themselves: byte sizes from the tensors, live bytes from the trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import torch

SCHEDULE = {"skip_first": 1, "wait": 0, "warmup": 1, "active": 2}  # the window holds steps 2-3 of 4
OPTIONS: dict[str, Any] = {"schedule": SCHEDULE, "profile_memory": True, "record_shapes": True,
                           "check_dataloaders": False}


def sizes(params: list[torch.Tensor], optimizer: torch.optim.Optimizer, device: str) -> tuple[int, int, int]:
    """Parameters, gradients (as each parameter's size: a gradient has its parameter's shape and dtype) and the
    optimizer's state tensors on ``device``, as numel times element size."""
    p = sum(t.numel() * t.element_size() for t in params)
    g = sum(t.numel() * t.element_size() for t in params if t.requires_grad)
    o = sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
            if isinstance(v, torch.Tensor) and v.device.type == device)
    return p, g, o


def trace_of(out: Path) -> Path:
    (trace,) = out.rglob("*.pt.trace.json.gz")
    return trace


def most_held(trace: Path, device_type: int) -> tuple[int, int]:
    """The most bytes that allocations made inside the trace held at once (matched to their frees by address), and
    the largest ``Total Allocated``, over the ``[memory]`` events of ``device_type`` (0: host, 1: CUDA)."""
    with gzip.open(trace, "rt") as f:
        events = [e["args"] for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    live: dict[int, int] = {}
    held = best = total = 0
    for a in sorted((a for a in events if a["Device Type"] == device_type), key=lambda a: a.get("Ev Idx", 0)):
        if a["Bytes"] > 0:
            held += a["Bytes"] - live.get(a["Addr"], 0)
            live[a["Addr"]] = a["Bytes"]
        elif a["Addr"] in live:
            held -= live.pop(a["Addr"])
        best, total = max(best, held), max(total, a["Total Allocated"])
    return best, total

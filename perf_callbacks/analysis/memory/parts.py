"""What the memory peak of a window is made of: parameters, gradients, optimizer state, activations and the rest.

The training process writes the bytes of its parameters, gradients and optimizer state at the window's end into
the trace (``perf_callbacks.core.memory.parts``), with ``resident``: the bytes of those tensors that lived through the
whole window, and ``new_gradients``: gradients allocated again inside it. The trace's ``[memory]`` events
(``profile_memory=True``) give the rest. Allocations are matched to their frees by address; at the peak, each
allocation still alive is put down to the phase span it was made in (``perf_callbacks.forward`` ...):

- the peak: on a device, the largest ``Total Allocated`` (the allocator's own count, absolute). On the host, torch
  counts only what was allocated while it profiled, so the peak is ``resident`` plus the most the window's own
  allocations held at once.
- ``gradients``: the gradients kept through the window, plus the gradients made again inside it as far as memory
  allocated in backward is still alive at the peak (none when the peak comes in forward, before any gradient exists).
- ``activations``: memory allocated in forward and still alive at the peak (what backward needs).
- ``other``: the rest at the peak: temporaries of backward and of the optimizer step, the batch, and on a device
  what was allocated before the trace but is none of the three parts.

``memory_at_peak`` says where the peak came (phase, op) and, on a device, how much of it was allocated before the
trace (``before_trace``) against what the process says lived through the window (``resident``): the difference
(``not_resident``) is memory the three parts do not explain (the batch, tensors of an earlier step).

Example:
    >>> events = [(10.0, 1, 400, 1400, 1, 1), (20.0, 1, 100, 1500, 1, 2), (30.0, 1, -100, 1400, 1, 2)]
    >>> parts = {"parameters": 600, "gradients": 0, "optimizer_state": 400, "resident": 1000, "new_gradients": 0}
    >>> cats, at = categories(events, ["aten::mm", "aten::add", None], [(0.0, 15.0, "forward"),
    ...                       (15.0, 40.0, "backward")], parts, "device")
    >>> cats
    {'parameters': 600, 'gradients': 0, 'optimizer_state': 400, 'activations': 400, 'other': 100, 'peak': 1500}
    >>> at["phase"], at["op"], at["not_resident"]
    ('backward', 'aten::add', 0)
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from typing import Any

from perf_callbacks.analysis.trace.extra_events import Memory

META_KEY = "perf_callbacks_memory"
"""The trace metadata key written by the training process (``perf_callbacks.core.memory.parts.META_KEY``)."""
KEYS = ("parameters", "gradients", "optimizer_state", "activations", "other", "peak")
"""The keys of ``memory_categories``, in bytes."""
CONCERN = 0.85
"""A peak at or above this share of the device's memory is a concern: only then does the report advise on memory."""
CATEGORY_ADVICE = {
    "optimizer_state": "shard it across ranks (ZeroRedundancyOptimizer, FSDP, DeepSpeed ZeRO-1/2) or use a "
                       "lower-memory optimizer (8-bit Adam)",
    "activations": "use activation checkpointing (torch.utils.checkpoint, or your model's gradient checkpointing "
                   "option), a smaller micro-batch with gradient accumulation, or bf16 autocast",
    "parameters": "shard the parameters (FSDP, DeepSpeed ZeRO-3) or keep them in lower precision (bf16)",
    "gradients": "shard the gradients (FSDP, DeepSpeed ZeRO-2) or keep them in lower precision (bf16)",
}
"""The fix for the largest part (also the OOM summary's, ``perf_callbacks.core.memory.oom_report``)."""
_PARTS = ("parameters", "gradients", "optimizer_state", "resident", "new_gradients")


def parts_of(meta: dict[str, Any]) -> dict[str, Any]:
    """The process's entry in a trace's metadata with byte counts of the right type, or {} (absent or malformed)."""
    raw = meta.get(META_KEY)
    if not isinstance(raw, dict) or not all(_count(raw.get(k)) for k in _PARTS):
        return {}
    capacity = raw.get("capacity")
    return {**{k: int(raw[k]) for k in _PARTS}, "capacity": capacity if _count(capacity) and capacity else None}


def categories(events: list[Memory], owners: list[str | None], phases: list[tuple[float, float, str]],
               parts: dict[str, Any], kind: str | None) -> tuple[dict[str, int] | None, dict[str, Any] | None]:
    """``(memory_categories, memory_at_peak)`` of one rank, or (None, None) without both events and parts.

    Args:
        events: the ``[memory]`` events the figures use, in time order (``memory_ops.memory_events``).
        owners: the innermost op of each event (None: outside any op).
        phases: our phase spans ``(start, end, name)``.
        parts: :func:`parts_of` the trace's metadata.
        kind: ``device`` or ``host``.
    """
    if not events or not parts or any(len(e) < 6 or e[5] is None for e in events):
        return None, None
    held = _held(events)
    i = _peak_index(events, held, kind)
    by_phase = _live_by_phase(events[: i + 1], sorted(phases))
    new_grads = min(parts["new_gradients"], by_phase.get("backward", 0))
    grads = parts["gradients"] - parts["new_gradients"] + new_grads
    peak = int(events[i][3]) if kind == "device" else parts["resident"] + held[i]
    activations = by_phase.get("forward", 0)
    other = max(peak - parts["parameters"] - parts["optimizer_state"] - grads - activations, 0)
    cats = {"parameters": parts["parameters"], "gradients": grads, "optimizer_state": parts["optimizer_state"],
            "activations": activations, "other": other}
    cats["peak"] = sum(cats.values())  # == peak unless the three parts exceed it (not all on the measured device)
    at: dict[str, Any] = {"phase": _phase_at(events[i][0], sorted(phases)), "op": owners[i] or "(outside any op)",
                          "memory": kind, "capacity": parts.get("capacity"), "resident": parts["resident"]}
    if kind == "device":
        at["before_trace"] = peak - held[i]
        at["not_resident"] = at["before_trace"] - parts["resident"]
    return cats, at


def largest(cats: dict[str, int]) -> str:
    """The largest of parameters, gradients, optimizer state and activations (``other`` has no single fix)."""
    return max(("optimizer_state", "activations", "parameters", "gradients"), key=lambda k: cats.get(k, 0))


def advice(cats: dict[str, int] | None, at: dict[str, Any] | None) -> str | None:
    """The fix for the largest part, only when the peak is at or above ``CONCERN`` of the device's memory."""
    if not cats or not at or not at.get("capacity") or cats["peak"] < CONCERN * at["capacity"]:
        return None
    name = largest(cats)
    share = cats["peak"] / at["capacity"]
    return (f"memory: the peak holds {share:.0%} of the device's memory and {name.replace('_', ' ')} is its largest "
            f"part ({cats[name] / 1e9:.2f} GB): {CATEGORY_ADVICE[name]}")


def combine(per_rank: list[tuple[dict[str, int] | None, dict[str, Any] | None]]) -> tuple[Any, Any]:
    """The categories of the rank with the highest peak."""
    known = [(c, a) for c, a in per_rank if c is not None]
    return max(known, key=lambda ca: ca[0]["peak"]) if known else (None, None)


def _held(events: list[Memory]) -> list[int]:
    """After each event, the bytes allocated by the events so far and not yet freed (matched by address)."""
    live: dict[Any, int] = {}
    total, out = 0, []
    for e in events:
        addr, nbytes = e[5], e[2]
        if nbytes > 0:
            total += nbytes - live.get(addr, 0)
            live[addr] = nbytes
        elif nbytes < 0 and addr in live:
            total -= live.pop(addr)
        out.append(total)
    return out


def _peak_index(events: list[Memory], held: list[int], kind: str | None) -> int:
    """The first event at the peak: of ``Total Allocated`` on a device, of the window's own allocations on the host."""
    value = (lambda j: events[j][3]) if kind == "device" else held.__getitem__
    return max(range(len(events)), key=lambda j: (value(j), -j))


def _live_by_phase(events: list[Memory], phases: list[tuple[float, float, str]]) -> dict[str, int]:
    live: dict[Any, tuple[int, float]] = {}
    for e in events:
        if e[2] > 0:
            live[e[5]] = (e[2], e[0])
        elif e[2] < 0:
            live.pop(e[5], None)
    out: dict[str, int] = defaultdict(int)
    for nbytes, ts in live.values():
        out[_phase_at(ts, phases)] += nbytes
    return dict(out)


def _phase_at(ts: float, phases: list[tuple[float, float, str]]) -> str:
    """The innermost (latest started) phase span holding ``ts``; ``other`` outside them."""
    j = bisect_right(phases, (ts, math.inf, ""))
    for start, end, name in reversed(phases[:j]):
        if start <= ts <= end:
            return name
    return "other"


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

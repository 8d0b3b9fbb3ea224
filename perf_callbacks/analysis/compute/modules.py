"""Device time, FLOPs and parameters by ``nn.Module``, from module spans (``module_spans``) and their metadata.

Time: each kernel (on a CPU-only trace, each op's self time) goes to the innermost module span open on the thread
that launched it (ran it) at the moment it did. The backward has no spans of its own: each
``autograd::engine::evaluate_function:`` op carries the ``Sequence number`` of the forward op whose node it runs,
so the whole evaluation goes to the innermost module whose span held that forward op. What no span holds (the loss,
the optimizer, gradient accumulation) is ``(outside modules)``.

FLOPs and parameters come from the trace's metadata (``perf_callbacks_modules``, see ``core/module_spans.py``):
FLOPs counted per module on the FLOP-counting step (the same count as MFU's ``flops_per_step``), parameters as the
live model held them. Each module's figures include its submodules'. :func:`module_rows` aggregates them to a depth,
with repeated indices grouped as ``*`` (``blocks.*``) and each index kept too; ``modules_text.py`` renders them.

Example:
    >>> group_of("encoder.layers.11.attn")
    'encoder.layers.*.attn'
    >>> at_depth("encoder.layers.11.attn", 2), at_depth("encoder.layers.11.attn", 1), at_depth("0.fc", 1)
    ('encoder.layers.11', 'encoder', '0')
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.extra_events import ModuleSpan
from perf_callbacks.analysis.trace.timeline import Timeline
from perf_callbacks.analysis.trace.window import InWindow

META_KEY = "perf_callbacks_modules"
"""The trace metadata key written by the training process (``perf_callbacks.core.module_spans.META_KEY``)."""
OUTSIDE = "(outside modules)"
ROOT = "(root)"
"""The model itself: ops in its own forward, outside every submodule."""
_INDEX = re.compile(r"^\d+$")
Scope = tuple[float, float, str]


def rank_modules(trace: RankTrace, tl: Timeline) -> dict[str, Any]:
    """One rank's module figures at full depth (``{}`` without module spans or their metadata).

    Returns:
        ``{spans, note, root, time_us: {path: us}, total_us, calls: {path: n}, params: {path: n}, flops:
        {path: n} | None, flops_note}``; ``time_us`` and ``flops`` hold what each module ran itself, ``params`` what
        it holds itself; ``total_us`` is all device (CPU op) time of the window.
    """
    meta = modules_meta(trace.meta)
    spans = trace.extra.module_spans
    if not spans and not meta:
        return {}
    in_window = InWindow.of(tl)
    time_us, total = time_by_module(trace, in_window)
    calls: dict[str, int] = defaultdict(int)
    for ts, _end, _tid, path in spans:
        if in_window(ts):
            calls[path] += 1
    return {"spans": bool(spans), "note": meta.get("note", ""), "root": meta.get("root", ""),
            "time_us": dict(time_us), "total_us": total, "calls": dict(calls), "params": meta.get("params", {}),
            "flops": meta.get("flops"), "flops_note": meta.get("flops_note", "")}


def modules_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The ``perf_callbacks_modules`` metadata, with counts that are not non-negative ints dropped (``{}``: none)."""
    raw = meta.get(META_KEY)
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {"spans": raw.get("spans") is True, "note": str(raw.get("note") or ""),
                           "root": str(raw.get("root") or ""), "params": _counts(raw.get("params")),
                           "flops": _counts(raw.get("flops")) if isinstance(raw.get("flops"), dict) else None,
                           "flops_note": str(raw.get("flops_note") or "")}
    return out


def module_rows(ranks: Iterable[Any], depth: int = 1) -> list[dict[str, Any]]:
    """The window's rows at ``depth``: groups of repeated indices (``blocks.*``), then each member; then the rest.

    Args:
        ranks: the window's ``RankResult`` objects (their ``modules`` and ``flops``).
        depth: levels kept (1: the model's top-level modules; an index belongs to its container's level).

    Returns:
        Rows ``{module, group, members, time_us, time_fraction, flops, flops_fraction, params, calls}``, by time;
        ``group`` is the group a member row belongs to (None for others), ``members`` a group's member count.
    """
    found = [(r.modules, (r.flops or {}).get("flops_per_step")) for r in ranks if r.modules]
    if not found or not any(m["spans"] for m, _ in found):
        return []
    time_us: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for m, _ in found:
        _add(time_us, m["time_us"], depth)
        _add(calls, m["calls"], depth)
    total = sum(m["total_us"] for m, _ in found)
    flops_meta = next(((m["flops"], per) for m, per in found if m["flops"]), None)
    flops: dict[str, float] = defaultdict(float)
    per_step = None
    if flops_meta is not None:
        _add(flops, flops_meta[0], depth)
        per_step = flops_meta[1] or sum(flops_meta[0].values())
    params: dict[str, float] = defaultdict(float)
    _add(params, next((m["params"] for m, _ in found if m["params"]), {}), depth)
    rows = {key: _row(key, time_us.get(key, 0.0), total, flops.get(key) if per_step else None, per_step,
                      params.get(key), calls.get(key, 0)) for key in {*time_us, *flops, *params} if key is not None}
    out = _grouped(rows)
    attributed = sum(time_us.values())
    if total > 0:
        rest = None if not per_step else max(per_step - sum(flops.values()), 0.0)
        out.append(_row(None, max(total - attributed, 0.0), total, rest, per_step, None, 0))
    return out


def group_of(path: str) -> str:
    """The path with every index segment as ``*``."""
    return ".".join("*" if _INDEX.match(p) else p for p in path.split("."))


def at_depth(path: str, depth: int) -> str:
    """The path down to ``depth`` levels; an index is part of its container's level (``blocks.0`` is depth 1)."""
    out: list[str] = []
    level = 0
    for part in path.split(".") if path else []:
        if not out or not _INDEX.match(part):
            if level == depth:
                break
            level += 1
        out.append(part)
    return ".".join(out)


# ---- time by module -------------------------------------------------------------------------------------------------
def time_by_module(trace: RankTrace, in_window: InWindow) -> tuple[dict[str, float], float]:
    """Time by innermost module path, and all the time counted (device time, else CPU op self time).

    Only the ops (device ops) that start in ``in_window`` count; a step's bounds give that step's figures.
    """
    spans: list[ModuleSpan] = trace.extra.module_spans
    by_tid: dict[Any, list[Scope]] = defaultdict(list)
    for ts, end, tid, path in spans:
        by_tid[tid].append((ts, end, path))
    forward = _forward_owners(trace, by_tid)
    for ts, end, tid, seq, backward in trace.extra.seq_ops:
        if backward and seq in forward:
            by_tid[tid].append((ts, end, forward[seq]))
    points = _device_points(trace, in_window) if trace.has_gpu else _cpu_points(trace, in_window)
    time_us: dict[str, float] = defaultdict(float)
    total = 0.0
    for tid, pts in points.items():
        total += sum(w for _, w in pts)
        for (_t, w), owner in zip(pts, _owners(sorted(by_tid.get(tid, [])), pts), strict=True):
            if owner is not None:
                time_us[owner] += w
    return time_us, total


def _forward_owners(trace: RankTrace, by_tid: dict[Any, list[Scope]]) -> dict[int, str]:
    """Sequence number -> the innermost module span that held the forward op of that number."""
    ops: dict[Any, list[tuple[float, int]]] = defaultdict(list)
    for ts, _end, tid, seq, backward in trace.extra.seq_ops:
        if not backward and tid in by_tid:
            ops[tid].append((ts, seq))
    out: dict[int, str] = {}
    for tid, pts in ops.items():
        pts.sort()
        for (_ts, seq), owner in zip(pts, _owners(sorted(by_tid[tid]), pts), strict=True):
            if owner is not None:
                out.setdefault(seq, owner)
    return out


def _owners(scopes: list[Scope], points: list[tuple[float, Any]]) -> list[str | None]:
    """For points sorted by time, the innermost scope (sorted by start) open at each; scopes nest."""
    scopes.sort(key=lambda s: (s[0], -s[1]))
    out: list[str | None] = []
    stack: list[Scope] = []
    i = 0
    for t, _ in points:
        while i < len(scopes) and scopes[i][0] <= t:
            while stack and stack[-1][1] <= scopes[i][0]:
                stack.pop()
            stack.append(scopes[i])
            i += 1
        while stack and stack[-1][1] <= t:
            stack.pop()
        out.append(stack[-1][2] if stack else None)
    return out


def _device_points(trace: RankTrace, in_window: InWindow) -> dict[Any, list[tuple[float, float]]]:
    """Each device op's time, placed at its launch on the launching thread (kernels without a launch: ``None``)."""
    out: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for ts, end, _kind, _name, _dev, corr, _ext in trace.gpu:
        if not in_window(ts):
            continue
        launch = trace.launches.get(corr)
        if launch is None:
            out[None].append((ts, end - ts))
        else:
            out[trace.launch_tids.get(corr)].append((launch[0], end - ts))
    for pts in out.values():
        pts.sort()
    return out


def _cpu_points(trace: RankTrace, in_window: InWindow) -> dict[Any, list[tuple[float, float]]]:
    """Each cpu op's self time (its duration less its direct children's), placed at its start on its thread."""
    by_tid: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for ts, end, tid, _name in trace.cpu_ops:
        by_tid[tid].append((ts, end))
    out: dict[Any, list[tuple[float, float]]] = {}
    for tid, ops in by_tid.items():
        ops.sort(key=lambda o: (o[0], -o[1]))
        selfs: list[list[float]] = []
        stack: list[list[float]] = []
        for ts, end in ops:
            while stack and stack[-1][1] <= ts:
                stack.pop()
            if stack:
                stack[-1][2] -= min(end, stack[-1][1]) - ts
            frame = [ts, end, end - ts]
            stack.append(frame)
            selfs.append(frame)
        out[tid] = [(f[0], max(f[2], 0.0)) for f in selfs if in_window(f[0])]
    return out


# ---- rows -----------------------------------------------------------------------------------------------------------
def _add(into: dict[str, Any], values: dict[str, Any], depth: int) -> None:
    for path, v in values.items():
        into[at_depth(path, depth)] += v


def _row(key: str | None, time_us: float, total: float, flops: float | None, per_step: float | None,
         params: float | None, calls: int) -> dict[str, Any]:
    name = OUTSIDE if key is None else key or ROOT
    return {"module": name, "group": None, "members": 0, "time_us": round(time_us, 3),
            "time_fraction": time_us / total if total > 0 else 0.0,
            "flops": (flops or 0.0) if per_step else None,
            "flops_fraction": (flops or 0.0) / per_step if per_step else None,
            "params": int(params) if params else None, "calls": calls}


def _grouped(rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Groups of at least two paths that differ only in indices, each followed by its members; by time."""
    groups: dict[str, list[str]] = defaultdict(list)
    for key in rows:
        groups[group_of(key) if key else key].append(key)
    entries: list[tuple[float, list[dict[str, Any]]]] = []
    for pattern, keys in groups.items():
        if len(keys) < 2:
            entries.append((rows[keys[0]]["time_us"], [rows[keys[0]]]))
            continue
        members = [dict(rows[k], group=pattern) for k in sorted(keys, key=_natural)]
        head = _sum_row(pattern, members)
        entries.append((head["time_us"], [head, *members]))
    entries.sort(key=lambda e: -e[0])
    return [row for _, block in entries for row in block]


def _sum_row(pattern: str, members: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"module": pattern, "group": None, "members": len(members)}
    for key in ("time_us", "time_fraction", "flops", "flops_fraction", "params", "calls"):
        values = [m[key] for m in members if m[key] is not None]
        out[key] = sum(values) if values else None
    out["time_us"] = round(out["time_us"] or 0.0, 3)
    return out


def _natural(path: str) -> list[Any]:
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.split(".")]


def _counts(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def set_depth(result: Any, depth: int) -> None:
    """Recompute ``modules`` of ``result`` and of its other windows at ``depth``."""
    for r in (result, *result.others):
        r.modules = module_rows(r.ranks, depth)

"""What grows: the allocations a window's step made that are still alive at the window's end, by the op that made them.

Looked for only in a window whose trace says the run's memory grew (``META_KEY``, written by
``core/memory/growth.py`` once its detector fired), so a healthy run is never told it leaks. An allocation counts as
kept when a step made it and it was not freed before the end of the window's last step, so it outlived at least one
whole step; the last step is only the witness. A prefetch that allocates the next step's batch (freed one step later)
is alive at the end of the step after it, but not at the end of the window: it is not counted. An op is named only
when it kept memory in every step but the last, at least 1% of all that was kept and at least ``NAME_FLOOR`` (10%) of
the growth the run measured (a 4-byte loss kept each step is no cause of a 0.2 MB growth); its rate is the mean over
those steps. Allocations are matched to their frees by ``Addr`` and tied to the innermost op around them as in
:mod:`~perf_callbacks.analysis.memory.ops`.

``graph_kept``: whether what is kept holds an autograd graph, which ``.detach()`` would free. A graph is told by its
forward ops (those with a ``Sequence number``) whose backward never ran in the window: in every followed step the kept
allocations lie in at least ``GRAPH_OPS`` (2) such ops (a graph keeps the tensors its ops saved; one op's output
alone is a tensor kept, which ``.detach()`` shares and does not free). A tensor kept after its backward ran (the
graph's saved tensors freed by it), or made outside autograd, gets the neutral advice (``KEPT``).

Example:
    >>> from perf_callbacks.analysis.trace.events import RankTrace
    >>> t = RankTrace(path=None, meta={META_KEY: {"bytes_per_step": 2e6, "since_step": 6, "until_step": 24}},
    ...               steps=[(30, 0.0, 10.0, 1), (31, 10.0, 20.0, 1), (32, 20.0, 30.0, 1)])
    >>> events = [(1.0, 1, 2_000_000, 0, 0, 1), (2.0, 1, 500, 0, 0, 9), (3.0, 1, -500, 0, 0, 9),
    ...           (11.0, 1, 2_000_000, 0, 0, 2), (21.0, 1, 2_000_000, 0, 0, 3)]
    >>> found = kept_alive(t, events, ["aten::sub", "aten::mul", None, "aten::sub", "aten::sub"], "host")
    >>> found["by_op"], found["steps"]
    ([{'name': 'aten::sub', 'bytes_per_step': 2000000.0}], [30, 31])
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from math import isfinite
from typing import Any

from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.extra_events import Memory

META_KEY = "perf_callbacks_memory_growth"
"""The trace metadata of a growth the run measured: ``{bytes_per_step, since_step, until_step}``."""
OUTSIDE = "(outside any op)"
ROWS = 3
MIN_SHARE = 0.01  # an op that keeps less than this share of what the window kept is not named
NAME_FLOOR = 0.1  # an op that keeps less than this share of the run's measured growth per step is not named
_LOOK_BACK = 256
GRAPH_OPS = 2  # kept allocations in this many forward ops never backwarded, each step: a graph is kept
ADVICE = "a tensor kept across steps with its graph (a loss appended to a list? use `.detach()` or `.item()`)"
KEPT = ("a tensor made every step is still referenced (kept in a list or an attribute?); `.detach()` would not free "
        "it: keep a Python number (`.item()`) or drop it")


def growth_meta(meta: dict[str, Any]) -> dict[str, Any] | None:
    """The run's measured growth from a trace's metadata, or None (absent or malformed)."""
    raw = meta.get(META_KEY)
    if not isinstance(raw, dict):
        return None
    rate, since, until = raw.get("bytes_per_step"), raw.get("since_step"), raw.get("until_step")
    if not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0 and isfinite(rate)
            and _int(since) and _int(until)):
        return None
    return {"bytes_per_step": float(rate), "since_step": since, "until_step": until}


def kept_alive(trace: RankTrace, events: list[Memory], owners: list[str | None],
               kind: str | None) -> dict[str, Any] | None:
    """``{bytes_per_step, since_step, until_step, memory, steps, kept_per_step, by_op, graph_kept}``, or None.

    None without a growth. ``bytes_per_step``/``since_step``/``until_step``: the growth the run measured (trace
    metadata); ``steps``: the window's steps whose allocations were followed (all but the last); ``kept_per_step``:
    the bytes they kept, per step; ``by_op``: ``[{name, bytes_per_step}]``, the ops that kept memory in every one of
    them, above the floors, most first; ``graph_kept``: what they kept holds a graph (see the module's docstring).
    """
    growth = growth_meta(trace.meta)
    if growth is None:
        return None
    steps = _steps(trace)
    out = {**growth, "memory": kind, "steps": [n for n, _, _ in steps[:-1]], "kept_per_step": None, "by_op": [],
           "graph_kept": False}
    if len(steps) < 2 or not events or any(e[5] is None for e in events):
        return out
    end = steps[-1][2]
    live: dict[Any, tuple[float, Any, int, str]] = {}
    for event, owner in zip(events, owners, strict=True):
        if event[0] >= end:
            break
        if event[2] > 0:
            live[event[5]] = (event[0], event[1], event[2], owner or OUTSIDE)
        elif event[2] < 0:
            live.pop(event[5], None)
    kept: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    held: list[tuple[int, float, Any]] = []  # (step index, ts, thread) of each kept allocation
    for ts, tid, nbytes, name in live.values():
        i = next((i for i, (_, lo, hi) in enumerate(steps[:-1]) if lo <= ts < hi), None)
        if i is not None:
            kept[name][i] += nbytes
            held.append((i, ts, tid))
    n = len(steps) - 1
    total = sum(sum(per.values()) for per in kept.values()) / n
    floor = max(MIN_SHARE * total, NAME_FLOOR * growth["bytes_per_step"])
    rows = sorted(((sum(per.values()) / n, name) for name, per in kept.items() if len(per) == n),
                  key=lambda r: (-r[0], r[1]))
    out["by_op"] = [{"name": name, "bytes_per_step": rate} for rate, name in rows if rate >= floor][:ROWS]
    out["kept_per_step"] = total
    out["graph_kept"] = bool(out["by_op"]) and _graph_kept(trace, held, n)
    return out


def _graph_kept(trace: RankTrace, held: list[tuple[int, float, Any]], n: int) -> bool:
    """Whether what the ``n`` followed steps kept holds a graph (see the module's docstring).

    Each kept allocation goes to the innermost op with a ``Sequence number`` around it on its thread (the latest to
    start among those that contain it, looked for among the ``_LOOK_BACK`` ops that started last before it).
    """
    backwarded = {seq for *_, seq, backward in trace.extra.seq_ops if backward}
    forward: dict[Any, list[tuple[float, float, int]]] = defaultdict(list)
    for ts, end, tid, seq, backward in trace.extra.seq_ops:
        if not backward:
            forward[tid].append((ts, end, seq))
    for ops in forward.values():
        ops.sort()
    starts = {tid: [op[0] for op in ops] for tid, ops in forward.items()}
    graphs: dict[int, set[int]] = defaultdict(set)
    for i, ts, tid in held:
        ops = forward.get(tid, [])
        j = bisect_right(starts.get(tid, []), ts)
        inner = next((op[2] for op in reversed(ops[max(0, j - _LOOK_BACK):j]) if op[1] >= ts), None)
        if inner is not None and inner not in backwarded:
            graphs[i].add(inner)
    return all(len(graphs[i]) >= GRAPH_OPS for i in range(n))


def growth_lines(found: dict[str, Any] | None) -> list[str]:
    """The report's lines: the growth measured over the run, and what the window saw kept (or why not)."""
    if found is None:
        return []
    lines = [f"memory growth: the memory held at step start grew {_mb(found['bytes_per_step'])} per step over the run "
             f"(steps {found['since_step']}-{found['until_step']})"]
    steps = found["steps"]
    where = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}" if steps else ""
    if not found["by_op"]:
        why = ("the window has fewer than 2 steps" if not steps else "no [memory] events with addresses "
               "(profile with profile_memory=True)" if found["kept_per_step"] is None else
               f"no op kept {NAME_FLOOR:.0%} of the growth or more ({_mb(NAME_FLOOR * found['bytes_per_step'])} per "
               f"step) in each of {where}; all ops together kept {_mb(found['kept_per_step'])} a step: what grows is "
               "outside torch's allocator (Python objects, other libraries"
               + (", or the C allocator's heap pinned by small tensors kept across steps, even detached: keep "
                  "`.item()`" if found.get("memory") == "host" else "") + ") or not made every step")
        return [*lines, f"  kept across steps in this window: none found ({why})"]
    advice = ADVICE if found.get("graph_kept") else KEPT
    for r in found["by_op"]:
        lines.append(f"  {_mb(r['bytes_per_step'])} per step kept alive from {r['name']} ({where} of this window "
                     f"onward): {advice}")
    return lines


def _steps(trace: RankTrace) -> list[tuple[int, float, float]]:
    """The window's ``ProfilerStep`` spans (one per number: the earliest start, the latest end), in order."""
    spans: dict[int, tuple[float, float]] = {}
    for n, lo, hi, _ in trace.steps:
        a, b = spans.get(n, (lo, hi))
        spans[n] = (min(a, lo), max(b, hi))
    return sorted(((n, lo, hi) for n, (lo, hi) in spans.items()), key=lambda s: s[1])


def _mb(nbytes: float) -> str:
    if nbytes < 1e3:
        return f"{nbytes:.0f} B"
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.1f} kB"


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)

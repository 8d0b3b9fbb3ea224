"""The words of the torch.compile findings (see ``core/flops/compile_watch.py``): a recompile storm and graph breaks.

Each quotes what torch recorded (the guard that failed, the line that broke the graph) and the fixes.

Example:
    >>> from types import SimpleNamespace as R
    >>> frame = R(filename="/src/model.py", lineno=12, line="if y.sum() > 0:")
    >>> break_line(R(reason="generic_jump TensorVariable()", user_stack=[frame]))
    "data-dependent control flow (a Python if/while on a tensor's value) at model.py:12 `if y.sum() > 0:`"
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

DYNAMIC_FIXES = (
    "Each recompilation stops training while it compiles, and after torch._dynamo.config.recompile_limit of them "
    "torch runs the function eagerly. If a size changes: torch.compile(model, dynamic=True), or "
    "torch._dynamo.mark_dynamic(tensor, dim) on the changing dimension before the call, or pad inputs to a few "
    "fixed sizes (buckets); if a Python number changes (a step counter, a learning rate), pass it as a tensor")
BREAK_FIXES = (
    "each break ends a compiled graph and runs Python between the pieces. To remove one: torch.where or torch.cond "
    "instead of an if on a tensor's value, no print/.item()/.tolist() inside the compiled code; "
    "torch._dynamo.explain(model)(batch) lists them and torch.compile(model, fullgraph=True) makes each an error")


def break_line(record: Any) -> str:
    """One graph break: torch's reason (its first line) and the user's line that caused it."""
    reason = str(getattr(record, "reason", "") or "").strip()
    first = reason.splitlines()[0] if reason else "unknown reason"
    if first.startswith(("generic_jump", "Data-dependent branching")):
        first = "data-dependent control flow (a Python if/while on a tensor's value)"
    stack = getattr(record, "user_stack", None) or []
    if not stack:
        return first
    frame = stack[-1]
    line = (getattr(frame, "line", None) or "").strip()
    return f"{first} at {Path(str(frame.filename)).name}:{frame.lineno}" + (f" `{line}`" if line else "")


def graph_break_message(counts: Counter[str], step: int | None) -> str:
    """The graph-break report: how many, where, why (the 3 most frequent), and the fixes."""
    total = sum(counts.values())
    where = f"at step {step}" if step is not None else "during validation"
    reasons = "; ".join(f"{reason} ({n}x)" for reason, n in counts.most_common(3))
    more = f"; and {len(counts) - 3} more" if len(counts) > 3 else ""
    places = f"{len(counts)} place{'s' if len(counts) != 1 else ''}"
    return (f"torch.compile: {total} graph break{'s' if total != 1 else ''} in the compilation {where}, at "
            f"{places} in the code: {reasons}{more}. Counted in perf/compile/graph_breaks and said once: "
            f"{BREAK_FIXES}")


def storm_message(storm: list[tuple[int, float]], window: int, record: Any, gave_up: Any) -> str:
    """The recompile-storm warning: where, how long, the function and the guard that failed, and the fixes."""
    parts = []
    if storm:
        steps, seconds = [s for s, _ in storm], sum(s for _, s in storm)
        parts.append(f"torch.compile recompiled at {len(steps)} of the last {window} steps (steps "
                     f"{', '.join(map(str, steps[:8]))}{', ...' if len(steps) > 8 else ''}; "
                     f"{seconds:.1f} s of compilation)")
    func = _function(record)
    reason = _reason(record)
    parts.append(f"{func} was recompiled because {reason}" if reason else
                 f"{func} was recompiled (torch recorded no reason: run with TORCH_LOGS=recompiles to see it)")
    if gave_up is not None:
        parts.append(f"torch reached its recompile limit for {func} and now runs it eagerly for new inputs")
    return "; ".join(parts) + ". " + DYNAMIC_FIXES


def _function(record: Any) -> str:
    name = getattr(record, "co_name", None)
    if not name:
        return "the compiled function"
    filename, line = getattr(record, "co_filename", None), getattr(record, "co_firstlineno", None)
    if filename and Path(str(filename)).parent.name == "_dynamo":  # torch's own wrapper of a compiled module's call
        return "the compiled module"
    return f"`{name}` ({Path(str(filename)).name}:{line})" if filename else f"`{name}`"


def _reason(record: Any) -> str:
    """The recompile reason torch recorded, without its compile id (``0/4: tensor 'x' size mismatch ...``)."""
    reason = str(getattr(record, "recompile_reason", None) or "").strip()
    if not reason or reason.startswith("Unable to find"):
        return ""
    return re.sub(r"^\[?\d+/\d+\]?:\s*", "", reason.splitlines()[0])

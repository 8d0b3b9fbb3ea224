"""What the training window leaves out, and which DataLoader fetches are the training loader's.

perf-callbacks wraps validation inside training in a ``perf_callbacks.validation`` span and checkpoint saves in a
``perf_callbacks.checkpoint`` span. Their time is *set aside*: it is not step time, not data wait, not a cause in the
time-by-cause breakdown, and not in the GPU utilization window. DataLoader fetches inside them (the validation loader's)
are never input. torch.compile's compilation (its ``... (dynamo_timed)`` spans) is set aside the same way, and so are
the launch calls of a trace recorded under the CUPTI range profiler (its kernel replays, ``REPLAYS``).

The training loader's ``next()`` is exactly our ``perf_callbacks.data_wait`` spans; where a trace has them they are the
data wait. Traces written by other tools have none, and their ``enumerate(DataLoader)#...__next__`` events are used.
"""

from __future__ import annotations

from bisect import bisect_right

from perf_callbacks.analysis.trace.intervals import Span, union

ASIDE = {"perf_callbacks.validation": "validation", "perf_callbacks.checkpoint": "checkpoint",
         "perf_callbacks.overhead": "perf-callbacks' own logging"}
"""Our span names whose time is set aside, and what each is called in the report's note."""
DATA_WAIT = "perf_callbacks.data_wait"
COMPILE_SUFFIX = " (dynamo_timed)"
"""torch.compile's own spans while it compiles (``_compile.compile_inner (dynamo_timed)``...), nested: set aside."""
COMPILING = "torch.compile compilation"
REPLAYS = "CUPTI range profiler kernel replays"
"""The launch calls of a trace recorded under the CUPTI range profiler (``cuda_profiler_range`` events): each replays
its kernel once per metric pass on the host, profiler time and never the workload's; set aside."""

Named = tuple[float, float, str]


def is_loader_next(name: str) -> bool:
    """Whether ``name`` is torch's ``enumerate(DataLoader)#...__next__`` range.

    Example:
        >>> is_loader_next("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
        True
    """
    return name.startswith("enumerate(DataLoader)") and name.endswith("__next__")


def training_input(own: list[Span], loaders: list[Named], aside: list[Named]) -> tuple[list[Span], set[str]]:
    """The training loader's fetches and the names that describe them.

    Args:
        own: our ``perf_callbacks.data_wait`` spans (the training loader's ``next()``, timed by the adapters).
        loaders: ``(start, end, name)`` of every ``enumerate(DataLoader)#...__next__`` event.
        aside: ``(start, end, kind)`` of our validation and checkpoint spans.

    Returns:
        The data-wait spans (``own`` when there are any, else the DataLoader events outside ``aside``) and the loader
        names seen in them (``perf_callbacks.data_wait`` when ``own`` holds no DataLoader event).

    Example:
        >>> loaders = [(1, 2, "train"), (11, 15, "val")]
        >>> training_input([], loaders, [(10, 20, "validation")])
        ([(1, 2)], {'train'})
        >>> training_input([(0.5, 2.5)], loaders, [])
        ([(0.5, 2.5)], {'train'})
    """
    if own:
        inside = union(own)
        names = {n for a, _, n in loaders if within(inside, a)}
        return own, names or {DATA_WAIT}
    skip = union((a, b) for a, b, _ in aside)
    kept = [(a, b, n) for a, b, n in loaders if not within(skip, a)]
    return [(a, b) for a, b, _ in kept], {n for _, _, n in kept}


def within(merged: list[Span], t: float) -> bool:
    """Whether the time ``t`` falls inside one of the merged spans (each taken as ``[start, end)``).

    Example:
        >>> within([(1, 2), (5, 9)], 5), within([(1, 2), (5, 9)], 2)
        (True, False)
    """
    i = bisect_right(merged, (t, float("inf"))) - 1
    return i >= 0 and merged[i][0] <= t < merged[i][1]

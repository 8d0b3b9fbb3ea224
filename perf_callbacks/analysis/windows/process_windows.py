"""Successive profiling windows of one process in one folder, told apart from the ranks of one job.

torch's own ``tensorboard_trace_handler`` writes every window of a process into one folder, as
``<host>_<pid>.<timestamp>.pt.trace.json[.gz]``. Those files are windows of one rank, not ranks: two files with the
same ``<host>_<pid>`` come from one process. Files with no rank of their own (no ``distributedInfo`` rank and none in
the name) whose ProfilerStep numbers and time ranges follow one another without overlap are windows of one process
too. Ranks of one job run the same steps at the same time, so they never look like that.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from perf_callbacks.analysis.results.result import RankResult
from perf_callbacks.analysis.windows.tracesets import assign_order_ranks

_HANDLER_NAME = re.compile(r"(.+_\d+)\.\d+\.pt\.trace\.json(\.gz)?")


def process_windows(ranks: list[RankResult]) -> tuple[list[list[RankResult]], list[str]]:
    """Split one folder's results into windows, most recent first, with a note when it split them.

    Returns ``[ranks]`` and no note when the files are not successive windows of one process (or of each process).

    Example:
        >>> from perf_callbacks.analysis.results.result import RankResult, StepResult
        >>> def r(path, start, step): return RankResult(0, path, 1.0, None, None, None, 0.0, {},
        ...     [StepResult(step, 1.0)], {}, {}, [], [], None, [], {}, None, start_us=start,
        ...     end_us=start + 10)
        >>> windows, _ = process_windows([r("vm_7.1.pt.trace.json", 0, 2), r("vm_7.2.pt.trace.json", 30, 7)])
        >>> [[x.path for x in w] for w in windows]
        [['vm_7.2.pt.trace.json'], ['vm_7.1.pt.trace.json']]
    """
    layers = _by_process_name(ranks) or _successive(ranks)
    if layers is None:
        return [ranks], []
    for layer in layers:
        assign_order_ranks(layer)
    layers.sort(key=lambda layer: max(r.end_us for r in layer), reverse=True)
    note = (f"{len(layers)} successive profiling windows of one process in one folder (same <host>_<pid> in the "
            "file name, or no rank and steps that follow one another): analysed as windows, not as ranks")
    return layers, [note]


def _by_process_name(ranks: list[RankResult]) -> list[list[RankResult]] | None:
    """The k-th file of every ``<host>_<pid>`` makes window k, when some process wrote several files."""
    names = [_HANDLER_NAME.fullmatch(Path(r.path).name) for r in ranks]
    if not all(names):
        return None
    by_process: dict[str, list[RankResult]] = defaultdict(list)
    for r, m in zip(ranks, names, strict=True):
        by_process[m.group(1) if m else ""].append(r)
    if all(len(files) == 1 for files in by_process.values()):
        return None
    layers: list[list[RankResult]] = []
    for files in by_process.values():
        for k, r in enumerate(sorted(files, key=lambda r: r.start_us)):
            if k == len(layers):
                layers.append([])
            layers[k].append(r)
    return layers


def _successive(ranks: list[RankResult]) -> list[list[RankResult]] | None:
    """Each file its own window, when none has a rank and each one's steps and time come after the previous one's."""
    if len(ranks) < 2 or any(r.rank_source != "order" or not r.steps for r in ranks):
        return None
    ordered = sorted(ranks, key=lambda r: r.start_us)
    for before, after in zip(ordered, ordered[1:], strict=False):
        if after.start_us < before.end_us or min(s.step for s in after.steps) <= max(s.step for s in before.steps):
            return None
    return [[r] for r in ordered]


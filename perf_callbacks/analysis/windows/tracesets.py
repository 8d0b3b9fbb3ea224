"""Trace sets: which rank files of one folder belong to one job's window, and which must be kept apart.

Ranks come from ``distributedInfo``, then the file name, then the order of the files. Files are split into separate
sets when their ``distributedInfo`` says they come from different jobs, when their time ranges are far apart (more
than ``SEPARATE_US`` between them: separate runs), or when two files claim the same rank. A set is never compared with
another as ranks of one job.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from perf_callbacks.analysis.results.result import RankResult

SEPARATE_US = 1e6


def assign_order_ranks(ranks: list[RankResult]) -> None:
    """Give files with no rank in ``distributedInfo`` or name the lowest unused ranks, in file order."""
    used = {r.rank for r in ranks if r.rank_source != "order"}
    free = (n for n in range(len(ranks) + len(used) + 1) if n not in used)
    for r in ranks:
        if r.rank_source == "order":
            r.rank = next(free)


def split_sets(ranks: list[RankResult]) -> tuple[list[list[RankResult]], list[str]]:
    """Split one folder's rank results into trace sets, most recent first, with a note for each split.

    Example:
        >>> from perf_callbacks.analysis.results.result import RankResult
        >>> def r(rank, start): return RankResult(rank, f"r{rank}_{start}", 1.0, None, None, None, 0.0, {}, [], {},
        ...     {}, [], [], None, [], {}, None, start_us=start, end_us=start + 10)
        >>> sets, notes = split_sets([r(0, 0), r(1, 5), r(0, 9)])
        >>> [[x.rank for x in s] for s in sets], notes[0][:20]
        ([[0], [0, 1]], '2 files say rank 0 (')
    """
    sets: list[list[RankResult]] = []
    notes: list[str] = []
    by_run = _by_run(ranks)
    if len(by_run) > 1:
        notes.append(f"{len(by_run)} different jobs in one folder (distributedInfo differs): " +
                     "; ".join(f"{k or 'no distributedInfo'}: {len(v)} file(s)" for k, v in by_run.items()))
    for group in by_run.values():
        clusters = _by_time(group)
        if len(clusters) > 1:
            notes.append(f"{len(clusters)} separate time ranges in one folder (separate runs): analysed apart")
        for cluster in clusters:
            split, dup_notes = _unique_ranks(cluster)
            sets += split
            notes += dup_notes
    for s in sets:
        s.sort(key=lambda r: r.rank)
    sets.sort(key=lambda s: max(r.end_us for r in s), reverse=True)
    return sets, notes


def _by_run(ranks: list[RankResult]) -> dict[str, list[RankResult]]:
    """Group by job signature; files without ``distributedInfo`` join the one job when there is a single one."""
    groups: dict[str, list[RankResult]] = defaultdict(list)
    for r in ranks:
        groups[r.run_id].append(r)
    named = [k for k in groups if k]
    if "" in groups and len(named) == 1:
        groups[named[0]] += groups.pop("")
    return dict(groups)


def _by_time(ranks: list[RankResult]) -> list[list[RankResult]]:
    clusters: list[list[RankResult]] = []
    end = float("-inf")
    for r in sorted(ranks, key=lambda r: r.start_us):
        if not clusters or r.start_us > end + SEPARATE_US:
            clusters.append([])
        clusters[-1].append(r)
        end = max(end, r.end_us)
    return clusters


def _unique_ranks(ranks: list[RankResult]) -> tuple[list[list[RankResult]], list[str]]:
    """Move every second (third, ...) file claiming a rank into a set of its own kind."""
    layers: list[list[RankResult]] = []
    claims: dict[int, list[str]] = defaultdict(list)
    for r in sorted(ranks, key=lambda r: r.path):
        claims[r.rank].append(Path(r.path).name)
        depth = len(claims[r.rank]) - 1
        if depth == len(layers):
            layers.append([])
        layers[depth].append(r)
    notes = [f"{len(files)} files say rank {rank} ({', '.join(files)}): kept apart as separate trace sets, "
             "not compared as ranks of one job" for rank, files in sorted(claims.items()) if len(files) > 1]
    return layers, notes

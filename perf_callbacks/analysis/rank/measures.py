"""What an expert reads after the verdict: collective and transfer bandwidth, launch latency, memory by operator.

``rank_measures`` computes one rank's figures (the ``RankResult`` parts ``memory`` and ``measures``: communication,
overlap, copies, launch, memory by op, its peak, curve, categories and growth, the op table, the roofline and the
notes; and ``modules``);
``window_measures`` combines the ranks of a window into the ``AnalysisResult`` parts of the same names, and
``headline_scalars`` gives the TensorBoard figures.
"""

from __future__ import annotations

from typing import Any

from perf_callbacks.analysis.compute import modules, precision, roofline
from perf_callbacks.analysis.judge.gains import loss_recommendation
from perf_callbacks.analysis.measures import comms, copies, launch, op_table
from perf_callbacks.analysis.memory import growth as memory_growth
from perf_callbacks.analysis.memory import ops as memory_ops
from perf_callbacks.analysis.memory import parts as memory_parts
from perf_callbacks.analysis.results.parts import Measures, MemoryParts
from perf_callbacks.analysis.results.recommendation import Recommendation
from perf_callbacks.analysis.results.result import RankResult
from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.timeline import Timeline


def rank_measures(trace: RankTrace, tl: Timeline, top_k: int = 10, device_bytes: int | None = None) -> dict[str, Any]:
    """One rank's figures, as ``RankResult`` keyword arguments: its ``memory``, ``measures`` and ``modules``.

    ``device_bytes`` is the device's capacity (``MemoryParts.device_bytes``), None on a host.
    """
    comm_rows, overlap, comm_notes = comms.communication(trace, tl)
    copy_rows, copy_notes = copies.copies(trace, tl)
    events, kind = memory_ops.memory_events(trace)
    self_cpu, calls, owners = op_table.walk(trace, [(m[0], m[1]) for m in events])
    by_op = memory_ops.by_op(events, owners, calls)
    memory = {name: row["self_bytes"] for name, row in by_op.items()}
    cats, at = memory_parts.categories(events, owners, trace.phase_spans, memory_parts.parts_of(trace.meta), kind)
    rows, peaks = roofline.rank_roofline(trace, tl)
    return {
        "memory": MemoryParts(
            peak_bytes=trace.peak_allocated,
            device_bytes=device_bytes,
            by_op=memory_ops.top_by_op(by_op, top_k),
            peak=memory_ops.peak(events, owners, tl, kind),
            curve=memory_ops.curve(events, tl),
            categories=cats,
            at_peak=at,
            growth=memory_growth.kept_alive(trace, events, owners, kind),
        ),
        "measures": Measures(
            communication=comm_rows,
            overlap_fraction=overlap,
            copies=copy_rows,
            launch=launch.launch(trace, tl),
            op_table=op_table.op_table(trace, self_cpu, calls, memory, top_k),
            notes=comm_notes + copy_notes,
            roofline=rows,
            roofline_peaks=peaks,
            precision=precision.rank_precision(trace, tl, rows, peaks),
        ),
        "modules": modules.rank_modules(trace, tl),
    }


def window_measures(ranks: list[RankResult], top_k: int = 10) -> dict[str, Any]:
    """The window's figures from its ranks: its ``memory``, ``measures`` and ``modules``.

    Rows are summed over ranks, ``overlap_fraction`` is their mean, the memory peak the highest, and the launch
    latencies as ``launch.combine`` puts them.
    """
    overlaps = [r.measures.overlap_fraction for r in ranks if r.measures.overlap_fraction is not None]
    peaks = [r.memory.peak for r in ranks if r.memory.peak is not None]
    single = len(ranks) == 1
    cats, at = memory_parts.combine([(r.memory.categories, r.memory.at_peak) for r in ranks])
    return {
        "memory": MemoryParts(
            peak_bytes=max((r.memory.peak_bytes for r in ranks if r.memory.peak_bytes is not None), default=None),
            by_op=memory_ops.combine_by_op([r.memory.by_op for r in ranks], top_k),
            peak=max(peaks, key=lambda p: p["bytes"]) if peaks else None,
            categories=cats,
            at_peak=at,
            growth=next((r.memory.growth for r in ranks if r.memory.growth is not None), None),
        ),
        "measures": Measures(
            communication=(ranks[0].measures.communication if single
                           else comms.combine([r.measures.communication for r in ranks])),
            overlap_fraction=sum(overlaps) / len(overlaps) if overlaps else None,
            copies=ranks[0].measures.copies if single else copies.combine([r.measures.copies for r in ranks]),
            launch=launch.combine([r.measures.launch for r in ranks if r.measures.launch is not None]),
            op_table=(ranks[0].measures.op_table if single
                      else op_table.combine([r.measures.op_table for r in ranks])),
            **roofline.window_roofline(ranks),
        ),
        "modules": modules.module_rows(ranks),
    }


def window_notes(ranks: list[RankResult]) -> list[str]:
    """The ranks' notes on what could not be measured, each once."""
    return list(dict.fromkeys(n for r in ranks for n in r.measures.notes))


def window_advice(ranks: list[RankResult], recommendations: list[Recommendation]) -> list[Recommendation]:
    """The recommendations with the transfer rates that back them.

    A recommendation that advises on slow pageable copies by name (``HtoD/pageable`` in its ``copy_kinds``) gets the
    measured rates; without one, the advice is added (prefixed with the rank when there are several), with the gain of
    the rank's exposed copies.
    """
    out = list(recommendations)
    cats, at = memory_parts.combine([(r.memory.categories, r.memory.at_peak) for r in ranks])
    if (memory := memory_parts.advice(cats, at)) is not None:
        out.append(Recommendation(memory, "memory", None, None, "memory decides whether the run fits, not its speed: "
                                  "the peak is close to the device's capacity"))
    for r in ranks:
        for kind, rates, advice in copies.copy_advice(r):
            i = next((i for i, rec in enumerate(out) if kind in rec.copy_kinds), None)
            if i is None:
                out.append(loss_recommendation(r, "copy", f"rank {r.rank}: {advice}" if len(ranks) > 1 else advice))
            elif rates not in out[i]:
                out[i] = out[i].retext(f"{out[i]} (measured: {rates})")
    return out

"""Transfers: count, bytes, time and rate per copy kind (HtoD, DtoH, DtoD, PtoP) and host memory kind.

Every memcpy that starts in the window (outside the time set aside) counts, on every device of the rank. The rate is
total bytes / total copy time, in 1e9 bytes/s; for copies under ``SMALL_BYTES`` each (``.item()`` reads, say) the
report shows the time per copy instead, their latency. Copies without ``bytes`` (older traces) are counted and timed
only.
Advice comes from the rates, never from the kind alone: a pageable copy is called slow only when it ran at under half
the rate of the pinned copies of the same direction in the same trace, or, without any, of ``LINK_GBPS``; and only when
such copies, where they did not overlap compute, took at least ``ADVICE_SHARE`` of the window.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from perf_callbacks.analysis.results.result import RankResult
from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.schema import copy_kind
from perf_callbacks.analysis.trace.timeline import Timeline
from perf_callbacks.analysis.trace.window import InWindow, gbps, number

SMALL_BYTES = 64_000
"""A copy of fewer bytes than this (on average over its row) is latency, not bandwidth: a PCIe link moves 64 kB in
about 2.5 us, less than a copy's fixed cost, so its rate says how small it was, not how fast the link is."""
LINK_GBPS = 25.0
"""What a pinned host-device copy usually reaches on a PCIe 4.0 x16 link (about 25 of its 32 GB/s)."""
SLOW = 0.5
"""A pageable copy is slow below this fraction of the reference rate."""
ADVICE_SHARE = 0.05
"""The share of the window that slow copies must leave exposed (not overlapped) before the report advises on them."""
_FIX = {"HtoD": "pin the host buffers (DataLoader pin_memory=True) and copy with .to(device, non_blocking=True)",
        "DtoH": "copy into a pinned buffer (torch.empty(..., pin_memory=True)) with non_blocking=True"}
NO_BYTES = "copies without a byte count in the trace: counted and timed only, no GB/s"


def copies(trace: RankTrace, tl: Timeline) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows ``{kind, memory, count, bytes, total_ms, gbps}`` (most time first), and notes.

    ``bytes`` is summed over the copies (None when one has no size).
    """
    keep = InWindow.of(tl)
    acc: dict[tuple[str, str], list[Any]] = defaultdict(lambda: [0, 0, 0.0])
    for ts, end, _dev, name, nbytes in trace.extra.copies:
        if not keep(ts):
            continue
        kind, memory = copy_kind("memcpy", name).split("/")
        row = acc[(kind, memory)]
        size = number(nbytes)
        row[0] += 1
        row[1] = None if size is None or row[1] is None else row[1] + size
        row[2] += end - ts
    rows = [_figures(k, m, c, b, us / 1e3) for (k, m), (c, b, us) in acc.items()]
    rows.sort(key=lambda r: -r["total_ms"])
    return rows, [NO_BYTES] if any(r["bytes"] is None for r in rows) else []


def combine(per_rank: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows of several ranks summed per kind and memory; rates from the sums."""
    merged: dict[tuple[str, str], list[Any]] = {}
    for rows in per_rank:
        for r in rows:
            m = merged.setdefault((r["kind"], r["memory"]), [0, 0, 0.0])
            m[0] += r["count"]
            m[1] = None if r["bytes"] is None or m[1] is None else m[1] + r["bytes"]
            m[2] += r["total_ms"]
    return sorted((_figures(k, m, c, b, ms) for (k, m), (c, b, ms) in merged.items()), key=lambda r: -r["total_ms"])


def copy_advice(r: RankResult) -> list[tuple[str, str, str]]:
    """Pageable copies that ran slow: ``(kind, the rates that show it, advice)``; empty when none did, or too little.

    ``kind`` is the timeline's name of the copies (``HtoD/pageable``), so that a recommendation about them can carry the
    rates instead of repeating the advice.
    """
    rates = {(c["kind"], c["memory"]): c for c in r.measures.copies if c["gbps"] is not None}
    out = []
    for (kind, memory), c in sorted(rates.items()):
        if memory != "pageable" or kind not in ("HtoD", "DtoH"):
            continue
        pinned = rates.get((kind, "pinned"))
        ref, what = (pinned["gbps"], "the pinned copies' rate in this trace") if pinned else \
            (LINK_GBPS, "what a PCIe 4.0 x16 link carries pinned")
        exposed = r.copy_exposed_ms.get(f"{kind}/pageable", 0.0)
        share = exposed / r.span_ms if r.span_ms else 0.0
        if c["gbps"] >= SLOW * ref or share < ADVICE_SHARE:
            continue
        rates_text = f"{kind} copies from pageable memory ran at {c['gbps']:.1f} GB/s, {c['gbps'] / ref:.0%} of " \
                     f"{what} ({ref:.1f} GB/s)"
        out.append((f"{kind}/pageable", rates_text, f"{rates_text}; {exposed:.1f} ms of them ({share:.0%} of the "
                                                    f"window) did not overlap compute: {_FIX[kind]}"))
    return out


def _figures(kind: str, memory: str, count: int, nbytes: int | None, ms: float) -> dict[str, Any]:
    return {"kind": kind, "memory": memory, "count": count, "bytes": nbytes, "total_ms": ms,
            "gbps": gbps(nbytes, ms * 1e3)}


def is_small(row: dict[str, Any]) -> bool:
    """Whether a row's copies are too small on average for their rate to mean anything (``SMALL_BYTES``)."""
    return row["bytes"] is not None and row["count"] > 0 and row["bytes"] / row["count"] < SMALL_BYTES

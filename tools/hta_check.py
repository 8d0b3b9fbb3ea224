"""Manual check: HTA loads a window's per-rank traces and the merged file that ``report --merge-ranks`` writes.

HTA is no dependency of the project; run this with a Python that has it (docs/multi-node.md says how):

    python3 -m venv /tmp/htaenv && /tmp/htaenv/bin/pip install HolisticTraceAnalysis
    /tmp/htaenv/bin/python tools/hta_check.py WINDOW_DIR

It writes the merged file of all the window's ranks (``merged/`` inside the window, as the report does), loads the
window's folder and the merged file's folder with ``hta.trace_analysis.TraceAnalysis``, and prints per HTA rank its
events, the processes in it and the collective spans of each, then HTA's temporal breakdown (which wants GPU kernels:
on CPU-only traces HTA itself fails there, on the per-rank files as on the merged one). Exit code 1 when the window
folder does not load as one HTA rank per trace, or the merged file does not load as one trace holding every rank's
process.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the analysis is standard library only

COLLECTIVES = ("all_reduce", "AllReduce", "allreduce")


def load(folder: Path) -> tuple[dict[int, dict[str, object]], object]:
    """HTA's view of ``folder``: per rank, its events and collective spans by process; the temporal breakdown.

    The breakdown is HTA's error where HTA fails (on CPU-only traces it wants GPU kernels).
    """
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=str(folder))
    t = analysis.t
    names = t.symbol_table.sym_table
    ids = [i for i, s in enumerate(names) if any(c in s for c in COLLECTIVES)]
    out: dict[int, dict[str, object]] = {}
    for rank, df in sorted(t.traces.items()):
        comms = df[df["name"].isin(ids)]
        out[int(rank)] = {"events": len(df), "pids": sorted(int(p) for p in df["pid"].unique()),
                          "collectives by pid": {int(p): int(n) for p, n in comms.groupby("pid").size().items()}}
    try:
        breakdown: object = analysis.get_temporal_breakdown(visualize=False).to_dict("records")
    except Exception as e:  # noqa: BLE001 - reported, not raised: HTA's own limits
        breakdown = f"{type(e).__name__}: {e}"
    return out, breakdown


def main(window: Path) -> int:
    """Merge, load both ways with HTA, print; 0 when both load as expected."""
    import hta

    from perf_callbacks.analysis import analyze
    from perf_callbacks.analysis.windows.merge import merge_ranks

    result = analyze(window)
    ranks = sorted(r.rank for r in result.ranks)
    merged = merge_ranks(result, ",".join(map(str, ranks)))
    print(f"HTA {getattr(hta, '__version__', '?')}; window {window}: ranks {ranks}; merged: {merged}")
    (per_rank, split), (one, joined) = load(window), load(merged.parent)
    for title, found, breakdown in (("window folder", per_rank, split), ("merged folder", one, joined)):
        for rank, row in found.items():
            print(f"{title}: HTA rank {rank}: {row}")
        print(f"{title}: temporal breakdown: {breakdown}")
    ok = sorted(per_rank) == ranks and len(one) == 1 and next(iter(one.values()))["pids"] == ranks
    print("OK" if ok else "FAILED: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

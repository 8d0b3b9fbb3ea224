"""Speed and memory of perf_callbacks.analysis on the 65 MB input_bound trace, against a bare parse.

Each measurement runs in a fresh interpreter so peak RSS is its own. Prints a table and writes JSON.

    python benchmarks/analysis_speed.py [TRACE] [--out benchmarks/analysis_speed.json] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path

DEFAULT = Path(__file__).parents[1] / "tests" / "data" / "gpu_traces" / "input_bound.pt.trace.json.gz"
HTA_LOAD_S = 5.6  # issue 4's figure for HolisticTraceAnalysis TraceAnalysis load on this file (not re-measured)

_CHILD = """
import gzip, json, sys, time, tracemalloc
path, what, traced = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if what == "analyze":
    from perf_callbacks.analysis import analyze
else:
    import orjson
if traced:
    tracemalloc.start()
t = time.perf_counter()
if what == "analyze":
    analyze(path)
else:
    raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    (orjson.loads if what == "orjson" else json.loads)(raw)
el = time.perf_counter() - t
peak = tracemalloc.get_traced_memory()[1] / 1e6 if traced else 0.0
print(json.dumps({"seconds": el, "peak_mb": peak}))
"""


def measure(path: Path, what: str, repeat: int) -> dict[str, float]:
    """Best time of ``repeat`` untraced runs, and the tracemalloc peak of one more (traced) run."""
    cmd = [sys.executable, "-c", _CHILD, str(path), what]
    runs = [json.loads(subprocess.run([*cmd, "0"], capture_output=True, text=True, check=True).stdout)
            for _ in range(repeat)]
    traced = json.loads(subprocess.run([*cmd, "1"], capture_output=True, text=True, check=True).stdout)
    return {"seconds": min(r["seconds"] for r in runs), "peak_mb": traced["peak_mb"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace", nargs="?", default=str(DEFAULT))
    parser.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    path = Path(args.trace)
    with gzip.open(path) if path.name.endswith(".gz") else path.open("rb") as f:
        unzipped_mb = len(f.read()) / 1e6
    rows = {what: measure(path, what, args.repeat) for what in ("json", "orjson", "analyze")}
    floor = rows["orjson"]["seconds"]
    report = {
        "trace": str(path),
        "unzipped_mb": unzipped_mb,
        "rows": rows,
        "analyze_over_floor": rows["analyze"]["seconds"] / floor,
        "hta_load_s": HTA_LOAD_S,
        "hta_note": "quoted from issue 4, not measured in this run",
        "analyze_over_hta": rows["analyze"]["seconds"] / HTA_LOAD_S,
        "peak_over_unzipped": rows["analyze"]["peak_mb"] / unzipped_mb,
    }
    print(f"trace {path.name}: {unzipped_mb:.1f} MB unzipped; best of {args.repeat}, fresh interpreter each")
    print(f"{'what':<32}{'seconds':>10}{'peak MB':>10}  (peak: tracemalloc, Python heap)")
    for what, label in (("json", "gunzip + json.loads"), ("orjson", "gunzip + orjson.loads (floor)"),
                        ("analyze", "analyze() (whole analysis)")):
        print(f"{label:<32}{rows[what]['seconds']:>10.2f}{rows[what]['peak_mb']:>10.0f}")
    print(f"{'HTA TraceAnalysis load (issue)':<32}{HTA_LOAD_S:>10.2f}")
    print(f"analyze / floor = {report['analyze_over_floor']:.2f}x (target <= 1.5x)")
    print(f"analyze / HTA = {report['analyze_over_hta']:.2f} (target <= 0.33; HTA time quoted, not measured here)")
    print(f"peak / unzipped = {report['peak_over_unzipped']:.2f}x (target <= 3x)")
    Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Speed and memory of perf_callbacks.analysis on the 65 MB input_bound trace, against a bare parse.

Each measurement runs in a fresh interpreter so peak RSS is its own. Prints a table and writes JSON.

    python benchmarks/analysis_speed.py [TRACE] [--out benchmarks/analysis_speed.json] [--repeat 3]
        [--hta-python /path/to/venv/bin/python]

HTA is not a dependency (about 100 packages): to measure it in the same run, install it into a separate venv
(``python -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis``) and pass ``--hta-python``.
Otherwise issue 4's 5.6 s figure is used.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
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
import resource
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
print(json.dumps({"seconds": el, "peak_mb": peak, "rss_peak_mb": rss}))
"""

_HTA_CHILD = """
import logging, sys, time, warnings
warnings.simplefilter("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
TraceAnalysis(trace_dir=sys.argv[1])
print(time.perf_counter() - t)
"""


def measure(path: Path, what: str, repeat: int) -> dict[str, float]:
    """Best time of ``repeat`` untraced runs, and the tracemalloc peak of one more (traced) run."""
    cmd = [sys.executable, "-c", _CHILD, str(path), what]
    runs = [json.loads(subprocess.run([*cmd, "0"], capture_output=True, text=True, check=True).stdout)
            for _ in range(repeat)]
    traced = json.loads(subprocess.run([*cmd, "1"], capture_output=True, text=True, check=True).stdout)
    return {"seconds": min(r["seconds"] for r in runs), "peak_mb": traced["peak_mb"],
            "rss_peak_mb": min(r["rss_peak_mb"] for r in runs)}


def measure_hta(python: str, path: Path, repeat: int) -> float:
    """Best time of ``repeat`` HTA ``TraceAnalysis`` loads of ``path`` (copied as a one-rank trace folder)."""
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(path, Path(folder) / f"rank0{''.join(path.suffixes[-4:])}")
        return min(float(subprocess.run([python, "-c", _HTA_CHILD, folder], capture_output=True, text=True,
                                        check=True).stdout.split()[-1]) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace", nargs="?", default=str(DEFAULT))
    parser.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hta-python", help="an interpreter with HolisticTraceAnalysis installed, to time HTA too")
    args = parser.parse_args()
    path = Path(args.trace)
    with gzip.open(path) if path.name.endswith(".gz") else path.open("rb") as f:
        unzipped_mb = len(f.read()) / 1e6
    rows = {what: measure(path, what, args.repeat) for what in ("json", "orjson", "analyze")}
    floor = rows["orjson"]["seconds"]
    hta_s = measure_hta(args.hta_python, path, args.repeat) if args.hta_python else HTA_LOAD_S
    hta_note = "measured in this run" if args.hta_python else "quoted from issue 4, not measured in this run"
    report = {
        "trace": str(path),
        "unzipped_mb": unzipped_mb,
        "rows": rows,
        "analyze_over_floor": rows["analyze"]["seconds"] / floor,
        "hta_load_s": hta_s,
        "hta_note": hta_note,
        "analyze_over_hta": rows["analyze"]["seconds"] / hta_s,
        "peak_over_unzipped": rows["analyze"]["peak_mb"] / unzipped_mb,
    }
    print(f"trace {path.name}: {unzipped_mb:.1f} MB unzipped; best of {args.repeat}, fresh interpreter each")
    print(f"{'what':<32}{'seconds':>10}{'peak MB':>10}{'RSS MB':>10}  (peak: tracemalloc heap; RSS: whole process)")
    for what, label in (("json", "gunzip + json.loads"), ("orjson", "gunzip + orjson.loads (floor)"),
                        ("analyze", "analyze() (whole analysis)")):
        print(f"{label:<32}{rows[what]['seconds']:>10.2f}{rows[what]['peak_mb']:>10.0f}{rows[what]['rss_peak_mb']:>10.0f}")
    print(f"{'HTA TraceAnalysis load':<32}{hta_s:>10.2f}  ({hta_note})")
    print(f"analyze / floor = {report['analyze_over_floor']:.2f}x (target <= 1.5x)")
    print(f"analyze / HTA = {report['analyze_over_hta']:.2f} (target <= 0.33)")
    print(f"peak / unzipped = {report['peak_over_unzipped']:.2f}x (target <= 3x)")
    Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

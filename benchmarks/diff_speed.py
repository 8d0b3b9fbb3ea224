"""Wall time of ``perf-callbacks diff`` on a trace against a copy of itself, against ``report`` on the trace alone.

Each command runs as a fresh ``python -m perf_callbacks.cli`` process (start-up included), alternating report and
diff ``--repeat`` times; prints the medians and their ratio (target: diff <= 2x report).

    python benchmarks/diff_speed.py [TRACE] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

DEFAULT = Path(__file__).parents[1] / "tests" / "data" / "gpu_traces" / "input_bound.pt.trace.json.gz"


def _wall(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "perf_callbacks.cli", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", nargs="?", default=str(DEFAULT))
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / ("copy-" + Path(args.trace).name)
        shutil.copy(args.trace, copy)
        report, diff = [], []
        for _ in range(args.repeat):
            report.append(_wall(["report", args.trace]))
            diff.append(_wall(["diff", args.trace, str(copy)]))
    r, d = median(report), median(diff)
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    print(f"report: median {r:.2f} s  {[round(x, 2) for x in report]}")
    print(f"diff:   median {d:.2f} s  {[round(x, 2) for x in diff]}")
    print(f"ratio diff/report: {d / r:.2f} (target <= 2)")


if __name__ == "__main__":
    main()

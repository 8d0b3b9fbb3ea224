"""CPU time of ``perf-callbacks report --json`` against a bare load of the same trace, and against HTA and TraceLens.

Every measurement is one fresh interpreter (start-up counts, as it does for a user), timed as the child's CPU time
(user + system, from ``os.wait4``), so a busy machine slows the wall clock but hardly the ratio. The commands
alternate (bare, report, bare, report...) and each row is the median of ``--repeat`` runs.

    python benchmarks/analysis_speed.py [TRACE ...] [--repeat 7] [--out benchmarks/analysis_speed.json]
        [--hta-python /tmp/hta/bin/python] [--tracelens-python /tmp/hta/bin/python]

The bare load is ``gzip`` + ``orjson.loads`` of the whole file. HTA (``TraceAnalysis`` of the trace as a one-rank
folder) and TraceLens (``TreePerfAnalyzer.from_file``) are not dependencies (about 100 packages): install them into a
separate venv (``python -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis TraceLens``) and pass
its interpreter; without one the script says so and prints the bare-load ratio only. With several traces the ratios'
geometric mean is printed too. Written byte code is used (a first, untimed run of each command writes it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).parents[1]
DEFAULT = REPO / "tests" / "data" / "gpu_traces" / "input_bound.pt.trace.json.gz"
TARGET_BARE = 1.2
"""``report --json`` at most this many times the bare load's CPU time (issue 53)."""
TARGET_TOOLS = 5.0
"""``report --json`` at least this many times faster than HTA and TraceLens (issue 53)."""

_BARE = "import gzip, sys, orjson; p = sys.argv[1]; orjson.loads(gzip.open(p).read() if p.endswith('.gz') else " \
        "open(p, 'rb').read())"
_HTA = """
import logging, shutil, sys, tempfile, warnings
warnings.simplefilter("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
folder = tempfile.mkdtemp()
shutil.copy(sys.argv[1], folder + "/rank0.pt.trace.json" + (".gz" if sys.argv[1].endswith(".gz") else ""))
TraceAnalysis(trace_dir=folder)
"""
_TRACELENS = """
import logging, sys, warnings
warnings.simplefilter("ignore"); logging.disable(logging.CRITICAL)
from TraceLens import TreePerfAnalyzer
TreePerfAnalyzer.from_file(sys.argv[1])
"""


def cpu_seconds(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``cmd`` (its output dropped) and return its CPU seconds (user + system) and its peak RSS in MB."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{cmd[:3]} exited {proc.returncode}: {err[-500:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1e3


def commands(trace: Path, hta: str | None, tracelens: str | None) -> dict[str, list[str]]:
    """The commands timed on ``trace``: the bare load, the report, and HTA / TraceLens where an interpreter is given."""
    out = {"bare": [sys.executable, "-c", _BARE, str(trace)],
           "report": [sys.executable, "-m", "perf_callbacks.cli", "report", "--json", str(trace)]}
    if hta:
        out["hta"] = [hta, "-c", _HTA, str(trace)]
    if tracelens:
        out["tracelens"] = [tracelens, "-c", _TRACELENS, str(trace)]
    return out


def measure(trace: Path, repeat: int, hta: str | None, tracelens: str | None) -> dict[str, dict[str, float]]:
    """Median CPU seconds and peak RSS of each command, the commands alternating run by run."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmds = commands(trace, hta, tracelens)
    for what, cmd in list(cmds.items()):  # untimed: writes the byte code, warms the page cache
        try:
            cpu_seconds(cmd, env)
        except RuntimeError as err:  # another tool that cannot read this trace: left out of its ratio
            if what in ("bare", "report"):
                raise
            print(f"{trace.name}: {what} failed, left out ({str(err).splitlines()[-1][:100]})")
            del cmds[what]
    runs: dict[str, list[tuple[float, float]]] = {what: [] for what in cmds}
    for _ in range(repeat):
        for what, cmd in cmds.items():
            runs[what].append(cpu_seconds(cmd, env))
    return {what: {"cpu_s": statistics.median(r[0] for r in rs), "rss_mb": statistics.median(r[1] for r in rs),
                   "runs_cpu_s": [round(r[0], 3) for r in rs]} for what, rs in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="*", default=[str(DEFAULT)])
    parser.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--hta-python", help="an interpreter with HolisticTraceAnalysis installed, to time HTA too")
    parser.add_argument("--tracelens-python", help="an interpreter with TraceLens installed, to time TraceLens too")
    args = parser.parse_args()
    hta, tracelens = _usable(args.hta_python, "hta"), _usable(args.tracelens_python, "TraceLens")
    report: dict[str, object] = {"repeat": args.repeat, "traces": {}}
    ratios: dict[str, list[float]] = {"bare": [], "hta": [], "tracelens": []}
    print(f"CPU seconds of a fresh interpreter, median of {args.repeat} alternated runs")
    print(f"{'trace':<36}{'bare':>8}{'report':>8}{'HTA':>8}{'TrLens':>8}  report/bare  HTA/report  TraceLens/report")
    for name in args.traces:
        path = Path(name)
        rows = measure(path, args.repeat, hta, tracelens)
        rep = rows["report"]["cpu_s"]
        ratios["bare"].append(rep / rows["bare"]["cpu_s"])
        line = f"{path.name[:35]:<36}{rows['bare']['cpu_s']:>8.2f}{rep:>8.2f}"
        line += "".join(f"{rows[k]['cpu_s']:>8.2f}" if k in rows else f"{'-':>8}" for k in ("hta", "tracelens"))
        line += f"  {ratios['bare'][-1]:>10.2f}x"
        for k in ("hta", "tracelens"):
            if k in rows:
                ratios[k].append(rows[k]["cpu_s"] / rep)
            line += f"  {rows[k]['cpu_s'] / rep:>9.2f}x" if k in rows else f"  {'-':>10}"
        print(line)
        report["traces"][str(path)] = rows  # type: ignore[index]
    summary = {k: math.exp(statistics.fmean(map(math.log, v))) for k, v in ratios.items() if v}
    report["geomean"] = summary
    over = f" (geometric mean over {len(args.traces)} traces)" if len(args.traces) > 1 else ""
    for name, rows in report["traces"].items():  # type: ignore[attr-defined]
        if Path(name).name == DEFAULT.name:
            ratio = rows["report"]["cpu_s"] / rows["bare"]["cpu_s"]
            print(f"report / bare load on {DEFAULT.name} = {ratio:.2f}x (target <= {TARGET_BARE}x)")
    print(f"report / bare load{over} = {summary['bare']:.2f}x")
    for key, label, given in (("hta", "HTA", hta), ("tracelens", "TraceLens", tracelens)):
        if given:
            print(f"{label} / report{over} = {summary[key]:.2f}x (target >= {TARGET_TOOLS}x)")
        else:
            print(f"{label} / report: not measured (no --{key}-python interpreter with {label} installed)")
    Path(args.out).write_text(json.dumps(report, indent=2))


def _usable(python: str | None, module: str) -> str | None:
    """``python`` if it imports ``module``, else None (with one line that says why)."""
    if not python:
        return None
    if shutil.which(python) is None and not Path(python).exists():
        print(f"{python}: not found; {module} not measured")
        return None
    if subprocess.run([python, "-c", f"import {module}"], capture_output=True, cwd=tempfile.gettempdir()).returncode:
        print(f"{python} cannot import {module}; not measured")
        return None
    return python


if __name__ == "__main__":
    main()

"""Command line: ``perf-callbacks report PATH`` and ``perf-callbacks nsys -- python train.py ...``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``perf-callbacks`` command."""
    parser = argparse.ArgumentParser(prog="perf-callbacks", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_report(sub)
    _add_diff(sub)
    _add_nsys(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def _add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help="analyse traces: verdict, top ops, GPU utilization, stragglers")
    p.add_argument("path", help="a trace file, a window folder of per-rank traces, or a whole output_dir")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page")
    p.set_defaults(func=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from perf_callbacks.analysis import analyze, format_text, render_html

    try:
        result = analyze(args.path)
    except (FileNotFoundError, ValueError) as err:
        print(f"perf-callbacks report: {err}", file=sys.stderr)
        return 2
    if args.html:
        Path(args.html).write_text(render_html(result), encoding="utf-8")
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_text(result), end="\n" if args.json else "")
    return 0


def _add_diff(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "diff", help="compare two runs: what changed, whether it is beyond the noise, and why",
        description="Compare the latest complete window of BASE with that of NEW. Exit codes: 0 done; 1 a significant "
        "step-time regression larger than PCT with --fail-on-regression; 2 bad input.",
    )
    p.add_argument("base", help="before the change: a trace, a window folder, a run folder or an output_dir")
    p.add_argument("new", help="after the change: the same kinds of path")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page")
    p.add_argument("--fail-on-regression", metavar="PCT", type=float,
                   help="exit 1 when step time is significantly slower by more than PCT percent")
    p.add_argument("--window", action="append", metavar="W", default=[],
                   help="window index (0 = latest) or folder name; once for both sides, twice for BASE then NEW")
    p.set_defaults(func=_run_diff)


def _run_diff(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from perf_callbacks.analysis.diff_html import render_diff_html
    from perf_callbacks.analysis.diff_text import format_diff
    from perf_callbacks.analysis.diff_windows import diff_paths

    if len(args.window) > 2:
        print("perf-callbacks diff: give --window at most twice (BASE, then NEW)", file=sys.stderr)
        return 2
    windows = (args.window * 2)[:2] if args.window else [None, None]
    try:
        result = diff_paths(args.base, args.new, windows[0], windows[1])
        if args.html:
            Path(args.html).write_text(render_diff_html(result), encoding="utf-8")
    except (OSError, ValueError, EOFError) as err:
        print(f"perf-callbacks diff: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_diff(result), end="\n" if args.json else "")
    pct = result.step_time_ms["change_pct"]
    pct = float("inf") if pct is None else pct
    if args.fail_on_regression is not None and result.regression and pct > args.fail_on_regression:
        print(f"perf-callbacks diff: step time regressed by {pct:.1f}% (significant), more than "
              f"--fail-on-regression {args.fail_on_regression:g}%", file=sys.stderr)
        return 1
    return 0


def _add_nsys(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("nsys", help="print (or run) the Nsight Systems command that captures the profiling window")
    p.add_argument("--run", action="store_true", help="run the command instead of printing it")
    p.add_argument("-o", "--output", default="perf_callbacks", help="report name (default: %(default)s)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- python train.py ...")
    p.set_defaults(func=_run_nsys)


def _run_nsys(args: argparse.Namespace) -> int:
    import shlex
    import shutil
    import subprocess

    from perf_callbacks.core.nsys import nsys_command, nsys_guide

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print("perf-callbacks nsys: give the training command after --, e.g. -- python train.py", file=sys.stderr)
        return 2
    command = nsys_command(cmd, args.output)
    if not args.run:
        print(shlex.join(command) + "\n\n" + nsys_guide(cmd, args.output))
        return 0
    if shutil.which("nsys") is None:
        print(
            "perf-callbacks nsys: `nsys` is not on PATH. Install Nsight Systems (the CUDA toolkit has it in "
            f"/usr/local/cuda/bin) or add it to PATH, then run:\n  {shlex.join(command)}",
            file=sys.stderr,
        )
        return 127
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())

"""``perf-callbacks diff BASE NEW``: what changed between two runs, whether it is beyond the noise, and why.

Each side is a local path or a URL; a URL's sidecars and the traces that the diff parses are fetched into a local
mirror, and the printed paths name the URL again.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable
from typing import Any

from perf_callbacks.cli.common import (
    Parser,
    _positive,
    add_storage_options,
    add_trace_limit,
    failure,
    local,
    remote,
    timeout,
    trace_limit,
)


def add_diff(sub: argparse._SubParsersAction[Parser]) -> None:
    """The ``diff`` subcommand."""
    p = sub.add_parser(
        "diff", help="compare two runs: what changed, whether it is beyond the noise, and why",
        description="Compare every step of BASE's run with every step of NEW's (their step records, "
        "steps-rank*.f32), in the unit that matters, with a 95%% interval and a call against --threshold; "
        "--windows (or --window, or a side without a step record) compares the latest complete windows instead. "
        "Exit codes: 0 done; 1 a regression larger than PCT with --fail-on-regression; 2 bad input (a missing, "
        "unreadable or corrupt path); 3 a URL could not be read (timeout, unreachable, credentials); "
        "70 internal error; 130 interrupted (Ctrl-C).",
    )
    p.add_argument("base", help="before the change: a trace, a window folder, a run folder or an output_dir")
    p.add_argument("new", help="after the change: the same kinds of path")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page")
    p.add_argument("--fail-on-regression", metavar="PCT", type=float,
                   help="exit 1 when the call is a regression (windows: significantly slower step time) larger than "
                   "PCT percent")
    p.add_argument("--threshold", metavar="PCT", type=float, default=2.0,
                   help="the smallest change worth a call, in percent of the base (default: %(default)s)")
    p.add_argument("--windows", action="store_true",
                   help="compare the latest complete profiled windows (causes, ops, memory) instead of whole runs")
    p.add_argument("--window", action="append", metavar="W", default=[],
                   help="window index (0 = latest) or folder name; once for both sides, twice for BASE then NEW")
    p.add_argument("--jobs", type=_positive, default=8, metavar="N",
                   help="download up to N files at once from a URL (default: %(default)s)")
    add_storage_options(p)
    add_trace_limit(p)
    p.set_defaults(func=run_diff)


def run_diff(args: argparse.Namespace) -> int:
    """Compare the two sides and print the diff; 1 only for a regression beyond ``--fail-on-regression``."""
    if len(args.window) > 2:
        print("perf-callbacks diff: give --window at most twice (BASE, then NEW)", file=sys.stderr)
        return 2
    if not 0 < args.threshold < 100:
        print(f"perf-callbacks diff: --threshold must be between 0 and 100 percent, got {args.threshold:g}",
              file=sys.stderr)
        return 2
    if not args.windows and not args.window:
        from perf_callbacks.analysis.diff.run_wide import TooFewSteps

        try:
            runs = _run_records(args)
            if runs is not None:
                return _run_wide(args, *runs)
        except TooFewSteps as err:
            print(f"perf-callbacks diff: {err}; comparing the latest windows (--windows)", file=sys.stderr)
        except BrokenPipeError:
            raise
        except Exception as err:  # noqa: BLE001 - one line, never a traceback, never exit 1 (a regression)
            return failure("diff", err, "step records")
    return _windows(args)


def _run_records(args: argparse.Namespace) -> tuple[list[Any], list[Any]] | None:
    """Both sides' step records, or None when a side has none.

    Then windows are compared (with a note when only one side has a record; runs made before step records, and
    URLs, have none).
    """
    from perf_callbacks.analysis.diff.steps import read_run

    sides = [[] if remote(path) else read_run(local(path)) for path in (args.base, args.new)]
    if all(sides):
        return sides[0], sides[1]
    for path, records in zip((args.base, args.new), sides, strict=True):
        if any(sides) and not records:
            why = "a URL: its windows are read" if remote(path) else "no step record (steps-rank*.f32)"
            print(f"perf-callbacks diff: {path}: {why}; comparing the latest windows (--windows)", file=sys.stderr)
    return None


def _run_wide(args: argparse.Namespace, base: list[Any], new: list[Any]) -> int:
    """The run-wide comparison (the default): text, ``--json`` or ``--html``; 1 for a regression past PCT."""
    import json
    from pathlib import Path

    from perf_callbacks.analysis.diff.run_html import render_run_diff_html
    from perf_callbacks.analysis.diff.run_text import format_run_diff
    from perf_callbacks.analysis.diff.run_wide import compare_runs

    result = compare_runs(base, new, args.threshold / 100)
    if args.html:
        Path(args.html).write_text(render_run_diff_html(result), encoding="utf-8")
        print(f"perf-callbacks diff: wrote {Path(args.html).resolve()}", file=sys.stderr)
    finite = _finite(result)  # JSON
    ledgers = _ledgers(base, new)  # every second of both runs, part by part (analysis/ledger/compare.py)
    if ledgers is not None:
        from perf_callbacks.analysis.ledger.compare import format_ledger_diff

        finite["ledger"] = _finite(ledgers)
    text = format_run_diff(result) + (format_ledger_diff(ledgers) if ledgers is not None else "")
    print(json.dumps(finite, indent=2) if args.json else text, end="\n" if args.json else "")
    pct = result["effect"] * 100
    if args.fail_on_regression is not None and result["call"] == "regression" and pct > args.fail_on_regression:
        print(f"perf-callbacks diff: {result['unit']} regressed by {pct:.1f}%, more than --fail-on-regression "
              f"{args.fail_on_regression:g}%", file=sys.stderr)
        return 1
    return 0


def _finite(x: Any) -> Any:
    """``x`` with every infinite float (an interval with no bound) as None: valid JSON."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _ledgers(base: list[Any], new: list[Any]) -> dict[str, Any] | None:
    """Both runs' ledgers compared (None when a side did not close, or its description is damaged)."""
    from perf_callbacks.analysis.ledger.compare import compare_ledgers, record_ledgers

    try:
        return compare_ledgers(record_ledgers(base), record_ledgers(new))
    except (KeyError, TypeError, ValueError):
        return None


def _windows(args: argparse.Namespace) -> int:
    """The window comparison (``--windows``): the latest complete window of each side."""
    import json
    from pathlib import Path

    from perf_callbacks.analysis.diff.text import format_diff
    from perf_callbacks.analysis.html.diff_page import render_diff_html
    from perf_callbacks.analysis.windows.diff_sides import diff_paths

    windows = (args.window * 2)[:2] if args.window else [None, None]
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(trace_limit(args))
            base, new, shown = _local_copies(stack, args)
            result = diff_paths(base, new, windows[0], windows[1])
            if args.html:
                Path(args.html).write_text(shown(render_diff_html(result)), encoding="utf-8")
                print(f"perf-callbacks diff: wrote {Path(args.html).resolve()}", file=sys.stderr)
            text = shown(json.dumps(result.to_dict(), indent=2) if args.json else format_diff(result))
            skipped = [shown(line) for line in result.base.get("skipped", []) + result.new.get("skipped", [])]
    except BrokenPipeError:
        raise
    except Exception as err:  # noqa: BLE001 - one line, never a traceback, never exit 1 (a regression)
        return failure("diff", err, "traces")
    for line in dict.fromkeys(skipped):
        print(f"perf-callbacks diff: skipped {line}", file=sys.stderr)
    print(text, end="\n" if args.json else "")
    pct = result.step_time_ms["change_pct"]
    pct = float("inf") if pct is None else pct
    if args.fail_on_regression is not None and result.regression and pct > args.fail_on_regression:
        print(f"perf-callbacks diff: step time regressed by {pct:.1f}% (significant), more than "
              f"--fail-on-regression {args.fail_on_regression:g}%", file=sys.stderr)
        return 1
    return 0


def _local_copies(stack: contextlib.ExitStack, args: argparse.Namespace) -> tuple[str, str, Callable[[str], str]]:
    """BASE and NEW as local paths (a URL's sidecars and needed traces fetched), and what names them in the output."""
    names: dict[str, str] = {}
    paths = []
    windows = (args.window * 2)[:2] if args.window else [None, None]
    for path, window in zip((args.base, args.new), windows, strict=True):
        if remote(path):
            from perf_callbacks.analysis.windows.diff_sides import windows_read
            from perf_callbacks.cli.remote_read import mirrored

            mirror = stack.enter_context(mirrored(path, args.storage_options, args.jobs, timeout_s=timeout(args)))
            mirror.fill(f for w in windows_read(mirror.path, window) for f in w.files)  # the traces diff parses
            names[str(mirror.path)], path = path.rstrip("/"), str(mirror.path)
        else:
            path = local(path)
        paths.append(path)

    def shown(text: str) -> str:
        for local_path, url in names.items():
            text = text.replace(local_path, url)
        return text

    return paths[0], paths[1], shown

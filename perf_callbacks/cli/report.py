"""``perf-callbacks report PATH``: the verdict, utilization and advice from Kineto traces, local or at a URL.

A URL is mirrored locally first (``cli/remote_read.py``: sidecars first, traces only where the report parses them), and
the printed paths name the URL again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perf_callbacks.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PARTIAL,
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

REPORT_EPILOG = """\
exit codes:
  0   every trace file was analysed
  1   partial: some files could not be read (one line each on stderr); the report covers the rest
  2   nothing to report (no trace found, none readable, a missing or unreadable path), a bad option, or an
      unwritable --html path
  3   a URL could not be read: the storage did not answer within --timeout, was unreachable, or refused the
      credentials (one line says which)
  70  internal error: a bug in perf-callbacks (please report it)
  130 interrupted (Ctrl-C), with one line
"""


def add_report(sub: argparse._SubParsersAction[Parser]) -> None:
    """The ``report`` subcommand."""
    from perf_callbacks.analysis.rank.collect import default_jobs

    p = sub.add_parser("report", help="analyse traces: verdict, top ops, GPU utilization, stragglers",
                       description="Analyse Kineto traces: verdict, top ops, utilization, idle causes, stragglers.",
                       epilog=REPORT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", help="a trace file, a window folder of per-rank traces, or a whole output_dir; local or an "
                   "fsspec URL (s3://bucket/perf)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page (every window)")
    p.add_argument("--jobs", type=_positive, default=default_jobs(), metavar="N",
                   help="parse up to N trace files at once in separate processes, and download up to N at once from a "
                        "URL (default: the CPU cores, %(default)s; fewer parsed when memory is short)")
    add_storage_options(p)
    add_trace_limit(p)
    p.add_argument("--no-sidecars", action="store_true", help="parse every trace even where a sidecar summary matches")
    p.add_argument("--top", type=_positive, default=5, metavar="N",
                   help="ops in the op table (default: %(default)s; over 10 parses the traces, as sidecars keep 10)")
    p.add_argument("--modules", type=_positive, default=None, metavar="DEPTH",
                   help="device time, FLOPs and parameters by module down to DEPTH path segments (1: the top-level "
                        "modules, the default when the trace has module spans; needs module_spans=True, or PyTorch's "
                        "nn.Module: spans in another tool's trace)")
    p.add_argument("--sort", choices=("device_time", "self_cpu", "calls", "memory"), default="device_time",
                   help="order of the op table: self device time (default), self CPU time, calls, or self memory "
                        "allocated (needs profile_memory=True)")
    p.add_argument("--peak-tbps", type=float, default=None, metavar="TB/S",
                   help="the device's peak memory bandwidth in TB/s for the roofline table (default: what the trace "
                        "says, else the known-device table)")
    p.add_argument("--merge-ranks", nargs="?", const="", default=None, metavar="FILE",
                   help="also write the headline window's ranks as one timeline (one process per rank, clocks "
                        "aligned) that Perfetto and chrome://tracing open: to FILE, else merged-ranks.pt.trace.json.gz "
                        "next to the window's traces (a URL needs FILE)")
    p.add_argument("--ranks", default="slowest,median,0", metavar="LIST",
                   help="with --merge-ranks: which ranks, comma-separated rank numbers or slowest (the culprit, else "
                        "the longest step time) and median (default: %(default)s)")
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    """Check ``--html``, fetch a URL's files, and report (the exit codes of ``REPORT_EPILOG``)."""
    problem = _html_problem(args.html) if args.html else None
    if problem:
        print(f"perf-callbacks report: cannot write --html {args.html}: {problem}", file=sys.stderr)
        return EXIT_FAILED
    if args.merge_ranks == "" and remote(args.path):
        print("perf-callbacks report: --merge-ranks with a URL needs a FILE to write to", file=sys.stderr)
        return EXIT_FAILED
    try:
        with trace_limit(args):
            return _report_path(args)
    except BrokenPipeError:
        raise
    except Exception as err:  # noqa: BLE001 - the command prints one line, never a traceback
        return failure("report", err, "trace")


def _report_path(args: argparse.Namespace) -> int:
    """Report a local path, or a URL's local mirror."""
    if not remote(args.path):
        args.path = local(args.path)
        return _report(args)
    from perf_callbacks.cli.remote_read import fetched

    url, sidecars = args.path, not args.no_sidecars and args.top <= 10 and args.merge_ranks is None
    with fetched(url, args.storage_options, args.jobs, sidecars, timeout(args)) as local_path:
        args.path = str(local_path)
        return _report(args, lambda text: text.replace(str(local_path), url.rstrip("/")))


def _report(args: argparse.Namespace, shown: Callable[[str], str] = str) -> int:
    """Analyse ``args.path``; ``shown`` names the paths in what is printed (a remote URL for its local mirror)."""
    import json

    from perf_callbacks.analysis import analyze
    from perf_callbacks.analysis.windows.hang import hang_only

    try:
        result = analyze(args.path, top_k=max(args.top, 10), jobs=args.jobs,
                         sidecars=not args.no_sidecars and args.top <= 10, peak_tbps=args.peak_tbps)
    except (FileNotFoundError, ValueError):
        if (text := hang_only(args.path, args.json)) is None:  # a hung run's folder may hold no trace: its hang
            raise
        print(shown(text), end="")
        return EXIT_OK
    for error in result.errors:
        print(shown(f"perf-callbacks report: skipped {error}"), file=sys.stderr)
    if args.modules:
        from perf_callbacks.analysis.compute.modules import set_depth

        set_depth(result, args.modules)
    if args.merge_ranks is not None:
        from perf_callbacks.analysis.windows.merge import merge_ranks

        merged = merge_ranks(result, args.ranks, Path(args.merge_ranks) if args.merge_ranks else None)
        result.merged_trace = str(merged.resolve())
        print(shown(f"perf-callbacks report: wrote {result.merged_trace}"), file=sys.stderr)
    ledgers, out = _ledgers(args.path), result.to_dict()
    if args.html:
        from perf_callbacks.analysis import render_html
        from perf_callbacks.analysis.ledger.bars import ledger_section

        page = render_html(result).replace("</body>", ledger_section(ledgers) + "</body>", 1)  # a bar per rank
        Path(args.html).write_text(shown(page), encoding="utf-8")
        print(f"perf-callbacks report: wrote {Path(args.html).resolve()}", file=sys.stderr)
    if ledgers:  # every second of the run by part, per rank (analysis/ledger/)
        from perf_callbacks.analysis.ledger.text import ledger_json

        out["ledger"] = ledger_json(ledgers)
    text = json.dumps(out, indent=2) if args.json else _text(args, result, ledgers)
    print(shown(text), end="\n" if args.json else "")
    return EXIT_PARTIAL if result.errors else EXIT_OK


def _text(args: argparse.Namespace, result: Any, ledgers: list[Any]) -> str:
    """The text report (only where it is printed: ``--json`` renders none), the ledger's lines after it."""
    from perf_callbacks.analysis import format_text
    from perf_callbacks.analysis.ledger.text import ledger_lines

    lines = ledger_lines(ledgers) if ledgers else []
    return format_text(result, top_k=args.top, sort=args.sort) + "".join(f"{line}\n" for line in lines)


def _ledgers(path: str) -> list[Any]:
    """The ledgers of the run under ``path``; of a run that did not close, those so far (its last window's sidecars)."""
    from perf_callbacks.analysis.ledger.text import run_ledgers, so_far_ledgers

    try:
        return run_ledgers(path) or so_far_ledgers(path)
    except (KeyError, TypeError, ValueError, OSError):  # a damaged description: the report goes on without it
        return []


def _html_problem(target: str) -> str | None:
    """Why ``target`` cannot be written (checked before the analysis), or None."""
    import os

    path = Path(target)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        return "it is a folder"
    if not parent.is_dir():
        return f"folder {parent} does not exist"
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "permission denied"
    return None

"""Command line: ``perf-callbacks report PATH``, ``diff BASE NEW``, ``nsys -- python ...``, ``capture RUN_DIR``."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from perf_callbacks.cli_capture import add_capture

DESCRIPTION = """\
Why is my GPU training slow, and what should I change.

  perf-callbacks report PATH           verdict, utilization and advice from Kineto traces
  perf-callbacks diff BASE NEW         what changed between two runs, whether it is beyond the noise, and why
  perf-callbacks nsys -- python ...    the Nsight Systems command for the profiling window
  perf-callbacks capture RUN_DIR       ask a live run for a profiling window at its next step
"""
REPORT_EPILOG = """\
exit codes:
  0   every trace file was analysed
  1   partial: some files could not be read (one line each on stderr); the report covers the rest
  2   nothing to report (no trace found, none readable, a missing or unreadable path), a bad option, or an
      unwritable --html path
  3   a URL could not be read: the storage did not answer within --timeout, was unreachable, or refused the
      credentials (one line says which)
  70  internal error: a bug in perf-callbacks (please report it)
"""
EXIT_OK, EXIT_PARTIAL, EXIT_FAILED, EXIT_REMOTE, EXIT_INTERNAL = 0, 1, 2, 3, 70
EXIT_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``perf-callbacks`` command."""
    from perf_callbacks import __version__

    parser = _Parser(prog="perf-callbacks", description=DESCRIPTION,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"perf-callbacks {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_report(sub)
    _add_diff(sub)
    _add_nsys(sub)
    add_capture(sub)
    _tolerant_streams()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped reading (`| head`): end quietly, as Unix tools do
        _silence_stdout()
        return EXIT_PIPE
    return code


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors are one line with the way to the help (not the usage block)."""

    def error(self, message: str) -> NoReturn:  # noqa: D102 - argparse's
        self.exit(EXIT_FAILED, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def _failure(command: str, err: BaseException, what: str) -> int:
    """Say in one line why ``command`` failed; the exit code says whose the failure is (see ``REPORT_EPILOG``)."""
    from perf_callbacks._errors import describe_error
    from perf_callbacks.remote_read import RemoteError

    if isinstance(err, RemoteError):
        print(f"perf-callbacks {command}: {err}", file=sys.stderr)
        return EXIT_REMOTE
    if isinstance(err, (OSError, ValueError, EOFError, ImportError)):
        text = describe_error(err) if isinstance(err, OSError) and err.errno else str(err) or type(err).__name__
        print(f"perf-callbacks {command}: {text}", file=sys.stderr)
        return EXIT_FAILED
    print(f"perf-callbacks {command}: internal error ({type(err).__name__}: {err}); please report it with the "
          f"{what}", file=sys.stderr)
    return EXIT_INTERNAL


def _tolerant_streams() -> None:
    """Print what the terminal cannot encode (a non-ASCII path under ``PYTHONIOENCODING=ascii``) as escapes."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail again (Python's signal docs)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (captured output): nothing to flush at exit
        pass


def _add_report(sub: argparse._SubParsersAction[_Parser]) -> None:
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
    _add_storage_options(p)
    p.add_argument("--no-sidecars", action="store_true", help="parse every trace even where a sidecar summary matches")
    p.add_argument("--top", type=_positive, default=5, metavar="N",
                   help="ops in the op table (default: %(default)s; over 10 parses the traces, as sidecars keep 10)")
    p.add_argument("--modules", type=_positive, default=None, metavar="DEPTH",
                   help="device time, FLOPs and parameters by module down to DEPTH path segments (1: the top-level "
                        "modules, the default when the trace has module spans; needs module_spans=True)")
    p.add_argument("--sort", choices=("device_time", "self_cpu", "calls", "memory"), default="device_time",
                   help="order of the op table: self device time (default), self CPU time, calls, or self memory "
                        "allocated (needs profile_memory=True)")
    p.add_argument("--peak-tbps", type=float, default=None, metavar="TB/S",
                   help="the device's peak memory bandwidth in TB/s for the roofline table (default: what the trace "
                        "says, else the known-device table)")
    p.set_defaults(func=_run_report)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _run_report(args: argparse.Namespace) -> int:
    problem = _html_problem(args.html) if args.html else None
    if problem:
        print(f"perf-callbacks report: cannot write --html {args.html}: {problem}", file=sys.stderr)
        return EXIT_FAILED
    try:
        if not _remote(args.path):
            args.path = _local(args.path)
            return _report(args)
        from perf_callbacks.remote_read import fetched

        url, sidecars = args.path, not args.no_sidecars and args.top <= 10
        with fetched(url, args.storage_options, args.jobs, sidecars, _timeout(args)) as local:
            args.path = str(local)
            return _report(args, lambda text: text.replace(str(local), url.rstrip("/")))
    except BrokenPipeError:
        raise
    except Exception as err:  # noqa: BLE001 - the command prints one line, never a traceback
        return _failure("report", err, "trace")


def _report(args: argparse.Namespace, shown: Callable[[str], str] = str) -> int:
    """Analyse ``args.path``; ``shown`` names the paths in what is printed (a remote URL for its local mirror)."""
    import json

    from perf_callbacks.analysis import analyze, format_text, render_html
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
    if args.html:
        Path(args.html).write_text(shown(render_html(result)), encoding="utf-8")
        print(f"perf-callbacks report: wrote {Path(args.html).resolve()}", file=sys.stderr)
    text = format_text(result, top_k=args.top, sort=args.sort)
    print(shown(json.dumps(result.to_dict(), indent=2) if args.json else text), end="\n" if args.json else "")
    return EXIT_PARTIAL if result.errors else EXIT_OK


def _remote(path: str) -> bool:
    from perf_callbacks.core.files.remote import is_remote

    return is_remote(path)


def _local(path: str) -> str:
    """A local path, from a ``file://`` URL as ``output_dir`` takes it (``file:///data/perf``) or a plain path."""
    from perf_callbacks.core.files.remote import resolve_output

    return str(resolve_output(path, rank=0)[0]) if "://" in path else path


def _timeout(args: argparse.Namespace) -> float:
    """``--timeout``, else ``$PERF_CALLBACKS_TIMEOUT``, else the default (a bad variable: ``ValueError``)."""
    from perf_callbacks.remote_read import timeout_from_env

    return float(args.timeout) if args.timeout is not None else timeout_from_env()


def _add_storage_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage-options", type=_json_mapping, default=None, metavar="JSON",
                   help="fsspec options for a URL, e.g. '{\"client_kwargs\": {\"endpoint_url\": \"http://...\"}}' "
                        "(default: from the environment, e.g. AWS_ENDPOINT_URL)")
    p.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                   help="give up reading a URL after SECONDS, with exit code 3 (default: $PERF_CALLBACKS_TIMEOUT, "
                        "else 300; 0: no bound)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text}")
    return value


def _json_mapping(text: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text}")
    return value


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


def _add_diff(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser(
        "diff", help="compare two runs: what changed, whether it is beyond the noise, and why",
        description="Compare the latest complete window of BASE with that of NEW. Exit codes: 0 done; 1 a significant "
        "step-time regression larger than PCT with --fail-on-regression; 2 bad input (a missing, unreadable or "
        "corrupt path); 3 a URL could not be read (timeout, unreachable, credentials); 70 internal error.",
    )
    p.add_argument("base", help="before the change: a trace, a window folder, a run folder or an output_dir")
    p.add_argument("new", help="after the change: the same kinds of path")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page")
    p.add_argument("--fail-on-regression", metavar="PCT", type=float,
                   help="exit 1 when step time is significantly slower by more than PCT percent")
    p.add_argument("--window", action="append", metavar="W", default=[],
                   help="window index (0 = latest) or folder name; once for both sides, twice for BASE then NEW")
    p.add_argument("--jobs", type=_positive, default=8, metavar="N",
                   help="download up to N files at once from a URL (default: %(default)s)")
    _add_storage_options(p)
    p.set_defaults(func=_run_diff)


def _run_diff(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from perf_callbacks.analysis.diff.text import format_diff
    from perf_callbacks.analysis.html.diff_page import render_diff_html
    from perf_callbacks.analysis.windows.diff_sides import diff_paths

    if len(args.window) > 2:
        print("perf-callbacks diff: give --window at most twice (BASE, then NEW)", file=sys.stderr)
        return 2
    windows = (args.window * 2)[:2] if args.window else [None, None]
    try:
        with contextlib.ExitStack() as stack:
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
        return _failure("diff", err, "traces")
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
        if _remote(path):
            from perf_callbacks.analysis.windows.diff_sides import windows_read
            from perf_callbacks.remote_read import mirrored

            mirror = stack.enter_context(mirrored(path, args.storage_options, args.jobs, timeout_s=_timeout(args)))
            mirror.fill(f for w in windows_read(mirror.path, window) for f in w.files)  # the traces diff parses
            names[str(mirror.path)], path = path.rstrip("/"), str(mirror.path)
        else:
            path = _local(path)
        paths.append(path)

    def shown(text: str) -> str:
        for local, url in names.items():
            text = text.replace(local, url)
        return text

    return paths[0], paths[1], shown


def _add_nsys(sub: argparse._SubParsersAction[_Parser]) -> None:
    p = sub.add_parser("nsys", help="print (or run) the Nsight Systems command that captures the profiling window")
    p.add_argument("--run", action="store_true", help="run the command instead of printing it")
    p.add_argument("-o", "--output", default="perf_callbacks", help="report name (default: %(default)s)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- python train.py ...")
    p.set_defaults(func=_run_nsys)


def _run_nsys(args: argparse.Namespace) -> int:
    import shlex
    import shutil
    import subprocess

    from perf_callbacks.core.ranges.nsys import nsys_command, nsys_guide

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

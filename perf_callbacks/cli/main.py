"""Command line: ``perf-callbacks report PATH``, ``diff BASE NEW``, ``nsys -- python ...``, ``capture RUN_DIR``.

The parser, its Unix manners (a closed pipe, an unencodable path) and ``nsys`` are here; ``report``, ``diff`` and
``capture`` are in ``cli/report.py``, ``cli/diff.py`` and ``cli/capture.py``, and what they share in ``cli/common.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from perf_callbacks.cli.capture import add_capture
from perf_callbacks.cli.common import (
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_PIPE,
    EXIT_REMOTE,
    Parser,
)
from perf_callbacks.cli.diff import add_diff
from perf_callbacks.cli.report import REPORT_EPILOG, add_report

DESCRIPTION = """\
Why is my GPU training slow, and what should I change.

  perf-callbacks report PATH           verdict, utilization and advice from Kineto traces
  perf-callbacks diff BASE NEW         what changed between two runs, whether it is beyond the noise, and why
  perf-callbacks nsys -- python ...    the Nsight Systems command for the profiling window
  perf-callbacks capture RUN_DIR       ask a live run for a profiling window at its next step
"""
__all__ = ["EXIT_FAILED", "EXIT_INTERNAL", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PARTIAL", "EXIT_PIPE", "EXIT_REMOTE",
           "REPORT_EPILOG", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``perf-callbacks`` command."""
    command = ""
    try:
        args = _parser().parse_args(argv)
        command = f" {args.command}"
        code = int(args.func(args))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped reading (`| head`): end quietly, as Unix tools do
        _silence_stdout()
        return EXIT_PIPE
    except KeyboardInterrupt:  # Ctrl-C, in any command and at any point: one line and 128 + SIGINT, no traceback
        print(f"perf-callbacks{command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


def _parser() -> Parser:
    from perf_callbacks import __version__

    parser = Parser(prog="perf-callbacks", description=DESCRIPTION,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"perf-callbacks {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_report(sub)
    add_diff(sub)
    _add_nsys(sub)
    add_capture(sub)
    _tolerant_streams()
    return parser


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


def _add_nsys(sub: argparse._SubParsersAction[Parser]) -> None:
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


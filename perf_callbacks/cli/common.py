"""What the ``perf-callbacks`` subcommands share: exit codes, the parser, argument types, URL or local paths, failures.

``report`` and ``diff`` read a local path or a URL the same way (``--storage-options``, ``--timeout``), and say why
they failed in one line whose exit code says whose the failure is.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

EXIT_OK, EXIT_PARTIAL, EXIT_FAILED, EXIT_REMOTE, EXIT_INTERNAL = 0, 1, 2, 3, 70
EXIT_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command stopped by Ctrl-C


class Parser(argparse.ArgumentParser):
    """argparse, whose usage errors are one line with the way to the help (not the usage block)."""

    def error(self, message: str) -> NoReturn:  # noqa: D102 - argparse's
        self.exit(EXIT_FAILED, f"{self.prog}: error: {message} (see: {self.prog} --help)\n")


def failure(command: str, err: BaseException, what: str) -> int:
    """Say in one line why ``command`` failed; the exit code says whose the failure is (see ``REPORT_EPILOG``)."""
    from perf_callbacks._errors import describe_error
    from perf_callbacks.cli.remote_read import RemoteError

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


def _positive(text: str) -> int:
    """An argument type: an integer >= 1 (argparse names it in its error: ``invalid _positive value: 'x'``)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def remote(path: str) -> bool:
    """Whether ``path`` is a URL of object storage (not a local path or a ``file://`` URL)."""
    from perf_callbacks.core.files.remote import is_remote

    return is_remote(path)


def local(path: str) -> str:
    """A local path, from a ``file://`` URL as ``output_dir`` takes it (``file:///data/perf``) or a plain path."""
    from perf_callbacks.core.files.remote import resolve_output

    return str(resolve_output(path, rank=0)[0]) if "://" in path else path


def timeout(args: argparse.Namespace) -> float:
    """``--timeout``, else ``$PERF_CALLBACKS_TIMEOUT``, else the default (a bad variable: ``ValueError``)."""
    from perf_callbacks.cli.remote_read import timeout_from_env

    return float(args.timeout) if args.timeout is not None else timeout_from_env()


def add_storage_options(p: argparse.ArgumentParser) -> None:
    """``--storage-options`` and ``--timeout``: how a subcommand reads a URL."""
    p.add_argument("--storage-options", type=_json_mapping, default=None, metavar="JSON",
                   help="fsspec options for a URL, e.g. '{\"client_kwargs\": {\"endpoint_url\": \"http://...\"}}' "
                        "(default: from the environment, e.g. AWS_ENDPOINT_URL)")
    p.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                   help="give up reading a URL after SECONDS, with exit code 3 (default: $PERF_CALLBACKS_TIMEOUT, "
                        "else 300; 0: no bound)")


def add_trace_limit(p: argparse.ArgumentParser) -> None:
    """``--max-trace-mb``: the most JSON read from one trace once decompressed."""
    p.add_argument("--max-trace-mb", type=_megabytes, default=None, metavar="MB",
                   help="skip a trace holding more than MB of JSON once decompressed, with one line (default: "
                        "$PERF_CALLBACKS_MAX_TRACE_MB, else 2048; 0: no limit)")


@contextlib.contextmanager
def trace_limit(args: argparse.Namespace) -> Iterator[None]:
    """``--max-trace-mb`` in force while the command runs (the processes that parse traces inherit it).

    Raises:
        ValueError: ``$PERF_CALLBACKS_MAX_TRACE_MB`` is not a number >= 0.
    """
    from perf_callbacks.analysis.trace.loader import MAX_TRACE_ENV, max_trace_bytes

    if args.max_trace_mb is None:
        max_trace_bytes()  # a bad variable is one line before any work
        yield
        return
    before = os.environ.get(MAX_TRACE_ENV)
    os.environ[MAX_TRACE_ENV] = f"{args.max_trace_mb:g}"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MAX_TRACE_ENV, None)
        else:
            os.environ[MAX_TRACE_ENV] = before


def _megabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of MB: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be >= 0 MB, got {text}")
    return value


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

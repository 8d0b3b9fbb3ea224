"""``perf-callbacks capture RUN_DIR [--steps N] [--timeout S]``: ask a live run for a window at its next step.

It writes the request file ``RUN_DIR/capture`` (``core/triggers/requests.py``): every rank of the run that watches that
folder (its ``output_dir``, or the run's folder inside it; a remote ``output_dir`` through fsspec) records ``N`` steps
once: a run of one rank from its next step, within ``capture_poll_s`` seconds (2 s by default) and one step; a run of
several ranks from one global step they agree on through the run's folder (``core/triggers/agreement.py``), a few
poll periods ahead, the same on every rank.

It writes only into a live run's folder: one where a rank's live-run marker (``core/triggers/live.py``) is fresh.
Anywhere else it refuses with one line and exit code 2, as it does when ``RUN_DIR/capture`` exists and is not a
request (it never overwrites a file it did not write). A remote folder is read and written within ``--timeout``
seconds (``$PERF_CALLBACKS_TIMEOUT``); past it, or when the storage fails, one line and exit code 3.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from perf_callbacks.cli.common import EXIT_FAILED, EXIT_OK, add_storage_options, failure, local, remote, timeout

CAPTURE_EPILOG = """\
exit codes:
  0   the request was written for the live ranks named
  2   RUN_DIR is not a live run's folder, or its 'capture' file is not a request (left as it is), or not writable
  3   a URL could not be read or written within --timeout (unreachable, credentials)
"""


class Refused(Exception):
    """The folder is not one to write a request into (said in one line)."""


def add_capture(sub: Any) -> None:
    """The ``capture`` subcommand."""
    from perf_callbacks.core.triggers.captures import MAX_REQUEST_STEPS

    p = sub.add_parser("capture", help="ask a live run for a profiling window at its next step",
                       epilog=CAPTURE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR",
                   help="the live run's output_dir (or the run's folder in it), or its URL")
    p.add_argument("--steps", type=_steps, default=None,
                   help=f"steps to record, 1 to {MAX_REQUEST_STEPS} (default: the run's schedule.active)")
    add_storage_options(p)
    p.set_defaults(func=run_capture)


def run_capture(args: argparse.Namespace) -> int:
    """Write the request into a live run's folder; 2 when refused, 3 when a URL failed (see ``CAPTURE_EPILOG``)."""
    target = str(args.run_dir)
    try:
        if remote(target):
            request_id, where, ranks = _write_remote(target, args.steps, args.storage_options, timeout(args))
        else:
            request_id, where, ranks = _write_local(Path(local(target)), args.steps)
    except Refused as err:
        print(f"perf-callbacks capture: {err}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as err:  # noqa: BLE001 - one line, whatever the storage said
        return failure("capture", err, "command")
    runs = sorted({r.run for r in ranks})
    steps = f"{args.steps} steps" if args.steps else "schedule.active steps"
    start = "from their next step" if len(ranks) == 1 else "from one step they agree on (the same on every rank)"
    print(f"perf-callbacks: capture request {request_id} written to {where}: {len(ranks)} live rank(s) of run "
          f"{', '.join(runs)} look for it every {max(r.poll_s for r in ranks):g} s and record a window of {steps} "
          f"{start}")
    return EXIT_OK


def _write_local(folder: Path, steps: int | None) -> tuple[str, str, list[Any]]:
    from perf_callbacks.core.triggers.live import live_local
    from perf_callbacks.core.triggers.request_files import read_small
    from perf_callbacks.core.triggers.requests import REQUEST_FILE, parse_request, write_request

    if not folder.is_dir():
        raise Refused(f"{folder} is not a folder (give a live run's output_dir)")
    ranks = live_local(folder)
    if not ranks:
        raise Refused(_not_live(str(folder)))
    path = folder / REQUEST_FILE
    if os.path.lexists(path) and parse_request(read_small(path)) is None:
        raise Refused(f"{path} exists and is not a capture request: left as it is, nothing written")
    return write_request(folder, steps), str(path), ranks


def _write_remote(url: str, steps: int | None, options: dict[str, Any] | None,
                  timeout_s: float) -> tuple[str, str, list[Any]]:
    import fsspec

    from perf_callbacks.cli.remote_deadline import Bounded, bad_options
    from perf_callbacks.core.triggers.live import live_remote
    from perf_callbacks.core.triggers.request_files import read_remote_small
    from perf_callbacks.core.triggers.requests import REQUEST_FILE, parse_request, write_request

    try:
        raw, root = fsspec.core.url_to_fs(url, **dict(options or {}))
    except TypeError as err:
        raise bad_options(url, err) from err
    fs, root = Bounded(raw, url, timeout_s), str(root).rstrip("/")
    ranks = live_remote(fs, root)
    if not ranks:
        raise Refused(_not_live(url))
    path = f"{root}/{REQUEST_FILE}"
    if fs.exists(path) and parse_request(read_remote_small(fs, path, timeout_s=None)) is None:
        raise Refused(f"{url.rstrip('/')}/{REQUEST_FILE} exists and is not a capture request: left as it is, "
                      f"nothing written")
    return write_request(root, steps, fs=fs), f"{url.rstrip('/')}/{REQUEST_FILE}", ranks


def _not_live(where: str) -> str:
    return (f"{where} is not a live run's folder: no run is watching it for requests (a run with capture_poll_s > 0 "
            f"keeps .perf-callbacks-live-<run>-rank<R>.json in its output_dir while it trains); nothing written")


def _steps(text: str) -> int:
    from perf_callbacks.core.triggers.captures import MAX_REQUEST_STEPS

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_REQUEST_STEPS:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_REQUEST_STEPS}, got {text!r}")
    return value

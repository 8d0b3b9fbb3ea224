"""``perf-callbacks capture RUN_DIR [--steps N]``: ask a live run for a window at its next step.

It writes the request file ``RUN_DIR/capture`` (``core/triggers/requests.py``): every rank of the run that watches that
folder (its ``output_dir``, or the run's folder inside it; a remote ``output_dir`` through fsspec) records the next
``N`` steps once, within ``capture_poll_s`` seconds (2 s by default) and one step.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_capture(sub: Any) -> None:
    """The ``capture`` subcommand."""
    p = sub.add_parser("capture", help="ask a live run for a profiling window at its next step")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run's output_dir (or the run's folder in it), or its URL")
    p.add_argument("--steps", type=_steps, default=None, help="steps to record (default: the run's schedule.active)")
    p.set_defaults(func=run_capture)


def run_capture(args: argparse.Namespace) -> int:
    """Write the request; 2 when the folder is not there or not writable."""
    from perf_callbacks.core.triggers.requests import REQUEST_FILE, write_request

    target = str(args.run_dir)
    local = "://" not in target or target.startswith("file://")
    if local and not Path(target.removeprefix("file://")).is_dir():
        print(f"perf-callbacks capture: {target} is not a folder (give the run's output_dir)", file=sys.stderr)
        return 2
    try:
        request_id = write_request(target, args.steps)
    except Exception as err:  # noqa: BLE001 - one line, whatever the storage said
        print(f"perf-callbacks capture: could not write {target}/{REQUEST_FILE}: {err}", file=sys.stderr)
        return 2
    steps = f"{args.steps} steps" if args.steps else "schedule.active steps"
    print(
        f"perf-callbacks: capture request {request_id} written to {target.rstrip('/')}/{REQUEST_FILE}: each rank "
        f"of the run that sees it records a window of {steps} at its next step (within capture_poll_s)"
    )
    return 0


def _steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value

"""Sidecar summaries: ``rank{R}.summary.json`` next to a trace, written once so that reports need not parse it again.

The training process runs this module in a background subprocess at the end of each window::

    python -m perf_callbacks.analysis.sidecar TRACE [--meta JSON_STRING] [--top-k K]

It analyses the one trace, writes the sidecar atomically (a hidden temporary name, then a rename), and exits 0. When
the analysis fails it still writes a sidecar, with an ``"error"`` key, and exits 1. When the sidecar cannot be written
(a full disk), it leaves no temporary file, says why on its last stderr line (``No space left on device (ENOSPC):
<path>``) and exits 3. It never prints a traceback.
``perf-callbacks report`` uses a window's sidecars when every trace of it has a matching one (same file name and byte
size), so a report over hundreds of ranks reads kilobytes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perf_callbacks._errors import describe_error
from perf_callbacks.analysis.diff.steps import read_record
from perf_callbacks.analysis.ledger.parts import rank_ledger
from perf_callbacks.analysis.rank.collect import analyze_file
from perf_callbacks.analysis.render.console import console_parts
from perf_callbacks.analysis.render.text import format_text
from perf_callbacks.analysis.trace.sidecar_store import (
    CANNOT_WRITE,
    FORMAT,
    STDERR_PREFIX,
    read_sidecar,
    sidecar_path,
    write_atomic,
)
from perf_callbacks.analysis.windows.api import build_result

__all__ = ["FORMAT", "main", "read_sidecar", "sidecar_path", "write_sidecar"]

RANK_TOP_K = 10
"""Top ops kept in the sidecar's rank result (what a report lists at most by default)."""


def write_sidecar(trace: Path, meta: dict[str, Any] | None = None, top_k: int = 5) -> dict[str, Any]:
    """Analyse ``trace`` and write its sidecar; return what was written.

    Args:
        trace: one Kineto trace file.
        meta: anything the caller wants kept with the summary (window, partial, interrupted, steps, overhead_ms).
        top_k: how many top ops the ``text`` report lists.

    Returns:
        The sidecar: ``format``, ``trace``, ``trace_bytes``, ``meta``, ``ledger`` (the run's ledger up to the window's
        end, where the engine gave its readings in ``meta``'s ``ledger_so_far``), and either ``text``, ``scalars``,
        ``console`` (the window's console line as data, :mod:`perf_callbacks.analysis.render.console`), ``rank`` (the
        rank result as a dict), ``verdict`` and ``verdict_note``, or ``error`` (one line) when it failed.

    Example:
        >>> import tempfile, json, pathlib
        >>> t = pathlib.Path(tempfile.mkdtemp()) / "rank0.pt.trace.json"
        >>> _ = t.write_text(json.dumps({"traceEvents": []}))
        >>> write_sidecar(t)["error"].endswith("rank0.pt.trace.json: no profiled events (no events; no op, kernel or "
        ...                                    "ProfilerStep)")
        True
    """
    trace, meta = Path(trace), dict(meta or {})
    stamps = meta.pop("ledger_so_far", None)
    data: dict[str, Any] = {"format": FORMAT, "trace": trace.name, "trace_bytes": _size(trace), "meta": meta}
    if (ledger := _ledger_so_far(stamps)) is not None:
        data["ledger"] = ledger
    loaded = analyze_file(trace, max(top_k, RANK_TOP_K))
    if loaded.result is None:
        data["error"] = loaded.error or f"{trace}: could not be analysed"
    else:
        result = build_result(str(trace), [loaded.result], max(top_k, RANK_TOP_K))
        data.update(text=format_text(result, top_k=top_k), scalars=result.scalars(), verdict=result.verdict,
                    verdict_note=result.verdict_note, console=console_parts(result), rank=loaded.result.to_dict())
    write_atomic(sidecar_path(trace), json.dumps(data, indent=1, default=_plain))
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m perf_callbacks.analysis.sidecar TRACE [--meta JSON] [--top-k K]``.

    Exit status: 0 written, 1 the analysis failed, 2 usage, 3 the sidecar could not be written.
    """
    parser = argparse.ArgumentParser(prog="python -m perf_callbacks.analysis.sidecar",
                                     description="Write rank{R}.summary.json next to one trace.")
    parser.add_argument("trace", type=Path)
    parser.add_argument("--meta", default="{}", help="a JSON object kept in the sidecar as `meta`")
    parser.add_argument("--top-k", type=int, default=5, help="top ops in the text report (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        meta = json.loads(args.meta)
    except ValueError as err:
        print(f"perf-callbacks sidecar: --meta is not JSON ({err})", file=sys.stderr)
        return 2
    try:
        data = write_sidecar(args.trace, meta if isinstance(meta, dict) else {"value": meta}, args.top_k)
    except OSError as err:
        print(f"{STDERR_PREFIX}{describe_error(err, sidecar_path(args.trace))}", file=sys.stderr)
        return CANNOT_WRITE
    except Exception as err:  # noqa: BLE001 - a background summary never ends in a traceback
        data = _write_error(args.trace, meta, f"{args.trace}: analysis failed ({type(err).__name__}: {err})")
    if "error" in data:
        print(f"perf-callbacks sidecar: {data['error']}", file=sys.stderr)
        return 1
    return 0


def _write_error(trace: Path, meta: Any, error: str) -> dict[str, Any]:
    data = {"format": FORMAT, "trace": trace.name, "trace_bytes": _size(trace), "meta": meta, "error": error}
    with contextlib.suppress(OSError):
        write_atomic(sidecar_path(trace), json.dumps(data, default=_plain))
    return data


def _ledger_so_far(stamps: Any) -> dict[str, Any] | None:
    """The rank's ledger up to the window's end: its step record so far with the readings the engine took then.

    Only the run so far (``so_far``: true): ``wall_s`` ends at the window's end, ``after`` is the time from the last
    step's optimizer step to the window's end, and the window's finish is ``own``. None where it cannot be read.
    """
    if not isinstance(stamps, dict) or not isinstance(path := stamps.pop("record", None), str):
        return None
    try:
        record = read_record(Path(path))
        record.meta["ledger"] = stamps
        led = rank_ledger(record)
    except Exception:  # noqa: BLE001 - the ledger is not worth the window's summary
        return None
    return {**led.to_dict(), "so_far": True} if led is not None else None


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _plain(value: object) -> object:
    """JSON fallback for tuples inside results and for anything else unexpected (as text)."""
    return list(value) if isinstance(value, (tuple, set)) else str(value)


if __name__ == "__main__":
    sys.exit(main())

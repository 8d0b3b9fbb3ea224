"""Sidecar summaries: ``rank{R}.summary.json`` next to each trace (interim version; see issue 12's full one)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

FORMAT = "perf-callbacks-sidecar/1"


def sidecar_path(trace: Path) -> Path:
    """``rank{R}.summary.json`` next to ``rank{R}.pt.trace.json.gz``."""
    name = trace.name
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return trace.with_name(f"{name}.summary.json")


def write_sidecar(trace: Path, meta: dict[str, Any] | None = None, top_k: int = 5) -> dict[str, Any]:
    """Analyse one trace and write its sidecar atomically; returns what was written."""
    from perf_callbacks.analysis import analyze, format_text

    out: dict[str, Any] = {"format": FORMAT, "trace": trace.name, "trace_bytes": trace.stat().st_size,
                           "meta": meta or {}}
    try:
        result = analyze(trace, top_k=max(top_k, 1))
        out.update(text=format_text(result, top_k=top_k), scalars=dict(result.scalars()),
                   rank=result.ranks[0].to_dict() if result.ranks else None)
    except Exception as err:  # noqa: BLE001 - the sidecar records the failure instead
        out["error"] = f"{type(err).__name__}: {err}"
    dest = sidecar_path(trace)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    tmp.write_text(json.dumps(out))
    os.replace(tmp, dest)
    return out


def read_sidecar(trace: Path) -> dict[str, Any] | None:
    """The sidecar of ``trace`` if it exists and matches the trace (name and size), else None."""
    try:
        data: dict[str, Any] = json.loads(sidecar_path(trace).read_text())
    except (OSError, ValueError):
        return None
    if data.get("trace") != trace.name or data.get("trace_bytes") != trace.stat().st_size:
        return None
    return data


def main(argv: list[str] | None = None) -> int:
    """``python -m perf_callbacks.analysis.sidecar TRACE [--meta JSON] [--top-k K]``."""
    p = argparse.ArgumentParser(prog="python -m perf_callbacks.analysis.sidecar")
    p.add_argument("trace", type=Path)
    p.add_argument("--meta", default="{}")
    p.add_argument("--top-k", type=int, default=5)
    args = p.parse_args(argv)
    out = write_sidecar(args.trace, json.loads(args.meta), args.top_k)
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main())

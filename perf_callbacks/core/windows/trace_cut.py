"""Ending a window's trace where a step that never completed began.

A window closed at the end of training (not by an exception) names and holds only the steps that completed their
optimizer step. A step that began and did not complete one (its first fetch found no batch; an epoch ended in the
middle of a manual accumulation; a ``break`` right after a fetch) is cut from the uncompressed trace: its
``ProfilerStep#N``, every host event from its start on, and the device work those host calls launched. Device work
launched earlier stays, even where it ran after the cut.

Example:
    >>> events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "ts": 0, "dur": 10},
    ...           {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "ts": 10, "dur": 5},
    ...           {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "ts": 11, "dur": 2}]
    >>> [e["name"] for e in cut_events(events, 2)]
    ['ProfilerStep#1']
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", "Kernel", "Memcpy",
                         "Memset", "mtia_ccp_events"})
"""Events on a device's timeline (Kineto's categories, PyTorch 1.8-1.13's and MTIA's)."""


def cut_at_step(raw: Path, step: int) -> None:
    """Rewrite the uncompressed trace ``raw`` so that it ends where ``ProfilerStep#{step}`` began (see the module)."""
    data = json.loads(raw.read_bytes())
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        return
    kept = cut_events(events, step)
    if len(kept) != len(events):
        data["traceEvents"] = kept
        tmp = raw.with_name(raw.name + ".cut")  # never a half-written trace in place of a whole one (full disk)
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, raw)
        finally:
            tmp.unlink(missing_ok=True)


def cut_events(events: list[Any], step: int) -> list[Any]:
    """``events`` without ``ProfilerStep#{step}`` and what ran from its start on; unchanged when it is absent."""
    name = f"ProfilerStep#{step}"
    cut = next((t for e in events if _host(e) and e.get("name") == name and (t := _ts(e)) is not None), None)
    if cut is None:
        return events
    launched = {_correlation(e) for e in events if _host(e) and (_ts(e) or 0.0) >= cut} - {None}
    device_cut = min((_ts(e) or 0.0 for e in events if _on_device(e) and _correlation(e) in launched), default=None)
    return [e for e in events if not _after(e, cut, launched, device_cut)]


def _after(event: Any, cut: float, launched: set[Any], device_cut: float | None) -> bool:
    """The event belongs to the cut step: a host event from its start on, or device work it launched."""
    if not isinstance(event, dict) or event.get("ph") == "M" or (ts := _ts(event)) is None:
        return False
    if event.get("cat") == "ac2g":  # a launch flow: its id is the launch's correlation
        return event.get("id") in launched
    if _on_device(event):
        corr = _correlation(event)
        if corr is not None:
            return corr in launched
        return device_cut is not None and ts >= device_cut  # an annotation on the device timeline
    return _host(event) and ts >= cut


def _host(event: Any) -> bool:
    return (isinstance(event, dict) and event.get("ph") in ("X", "i", "I", "B", "E", "s", "f", "t")
            and isinstance(event.get("pid"), int) and not _on_device(event))


def _on_device(event: Any) -> bool:
    return isinstance(event, dict) and event.get("cat") in DEVICE_CATS


def _correlation(event: dict[str, Any]) -> Any:
    args = event.get("args")
    return args.get("correlation") if isinstance(args, dict) else None


def _ts(event: dict[str, Any]) -> float | None:
    ts = event.get("ts")
    return float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else None

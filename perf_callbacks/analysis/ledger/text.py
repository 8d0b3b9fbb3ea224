"""The ledger as the report shows it: one line per rank, the slowest rank's difference, advice, and JSON.

``run_ledgers(path)`` reads every rank's step record under ``path`` (``analysis/diff/steps.py``) and returns the
ledgers of the ranks whose run closed; :func:`summary_line` is the one line (``41 min, goodput 72%: checkpoints 14%,
evaluation 8%, data 4%``) that the console prints at the end of training and the report opens with.

Example:
    >>> from perf_callbacks.analysis.ledger.parts import PARTS, Ledger
    >>> parts = dict.fromkeys(PARTS, 0.0) | {"productive": 72.0, "checkpoint": 14.0, "data_wait": 4.0,
    ...                                      "evaluation": 8.0, "unaccounted": 2.0}
    >>> summary_line(Ledger(0, 100.0, parts, "process", 10, 1.0))
    '100 s, goodput 72%: checkpoints 14%, evaluation 8%, data 4%, unaccounted 2%'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.diff.steps import RECORD, find_run, read_run
from perf_callbacks.analysis.ledger.advice import ledger_advice
from perf_callbacks.analysis.ledger.parts import PARTS, Ledger, rank_ledger

__all__ = ["LABELS", "ledger_json", "ledger_lines", "run_ledgers", "so_far_ledgers", "summary_line"]
LABELS = {"startup_before": "start-up before the callback", "startup": "start-up", "productive": "productive",
          "warmup": "first step", "compile": "compile", "anomalous": "slow steps", "stalls": "stalls",
          "data_wait": "data", "worker_startup": "worker start-up", "evaluation": "evaluation",
          "checkpoint": "checkpoints", "set_aside": "set-aside", "own": "perf-callbacks",
          "after": "after the last step",
          "unaccounted": "unaccounted"}
SHOWN = 0.01  # a part under 1% of the wall time is left out of the line


def run_ledgers(path: str | Path) -> list[Ledger]:
    """The ledgers of the ranks under ``path`` (a run folder, a window folder or a trace in it, or an output dir).

    Only the run ``path`` belongs to: its own folder, the run folder right above a window folder, or the newest run
    below an output dir; never a run found by searching above ``path`` (another run, another test's, the user's).
    Ranks whose record did not close have no ledger.
    """
    try:
        run = run_folder(path)
        return [led for r in (read_run(run) if run is not None else []) if (led := rank_ledger(r)) is not None]
    except (OSError, ValueError):
        return []


def run_folder(path: str | Path) -> Path | None:
    """The run folder ``path`` belongs to; None: none.

    Itself (or the newest run below it: an output dir), or the run folder right above a window folder (or a trace in
    it); never one found by searching above ``path``.
    """
    root = Path(path)
    if root.is_file():
        root = root.parent
    if root.is_dir() and (run := find_run(root)) is not None:
        return run
    return root.parent if any(RECORD.fullmatch(p.name) for p in _listing(root.parent)) else None


def _listing(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def so_far_ledgers(path: str | Path) -> list[Ledger]:
    """The ledgers up to the last window of the run under ``path`` (found as :func:`run_ledgers` finds it).

    For a run that did not close (still running, or killed): each rank's ``ledger`` of its latest window's sidecar
    (``analysis/sidecar.py``), marked ``so_far``; [] without one.
    """
    run = run_folder(path)
    if run is None:
        return []
    latest: dict[int, dict[str, Any]] = {}
    for side in run.glob("window-*/rank*.summary.json"):
        try:
            led = json.loads(side.read_text(encoding="utf-8")).get("ledger")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(led, dict) and led.get("so_far") and isinstance(rank := led.get("rank"), int) and (
                rank not in latest or led["wall_s"] > latest[rank]["wall_s"]):
            latest[rank] = led
    return [Ledger(r, float(d["wall_s"]), {k: float(d["parts"].get(k, 0.0)) for k in PARTS}, str(d["origin"]),
                   int(d["steps"]), 0.0, so_far=True) for r, d in sorted(latest.items())]


def summary_line(led: Ledger) -> str:
    """``41 min, goodput 72%: checkpoints 14%, evaluation 8%, data 4%``: the parts over 1% of the wall time."""
    rest = sorted(((v, k) for k, v in led.parts.items() if k != "productive" and abs(v) >= SHOWN * led.wall_s),
                  reverse=True)
    shares = ", ".join(f"{LABELS[k]} {v / led.wall_s:.0%}" for v, k in rest)
    return f"{duration(led.wall_s)}, goodput {led.goodput:.0%}" + (f": {shares}" if shares else "")


def ledger_lines(ledgers: list[Ledger]) -> list[str]:
    """The report's lines: the slowest rank's ledger, each rank's over a multi-rank run, and the advice."""
    if not ledgers:
        return []
    slowest = max(ledgers, key=lambda led: led.wall_s)
    what = "ledger so far (to the last window; the run did not close)" if slowest.so_far else "ledger"
    lines = [f"{what}: {summary_line(slowest)}" + (f" (rank {slowest.rank}, the slowest)" if len(ledgers) > 1 else "")]
    if len(ledgers) > 1:
        for led in ledgers:
            lines.append(f"  rank {led.rank}: {summary_line(led)}{_difference(led, slowest)}")
    lines += [f"  {led.resumed.text()}" + (f" (rank {led.rank})" if len(ledgers) > 1 else "")
              for led in ledgers if led.resumed is not None][:1]
    lines += [f"  advice: {a.text}" for a in ledger_advice(slowest) if not slowest.so_far]
    if slowest.origin == "previous_run":
        lines.append("  (a later run of its process: the ledger starts where the run before it ended)")
    elif slowest.origin != "process":
        why = "an interactive session" if slowest.interactive else "the process' start was not readable"
        lines.append(f"  ({why}: the ledger starts at the {slowest.origin}'s construction)")
    return lines


def ledger_json(ledgers: list[Ledger]) -> dict[str, Any] | None:
    """The report's ``ledger`` object; None without a ledger.

    The slowest rank's (``wall_s``, ``goodput``, ``parts``, ``advice``, ``resumed``) and ``ranks``, each rank's.
    """
    if not ledgers:
        return None
    slowest = max(ledgers, key=lambda led: led.wall_s)
    advice = [{"part": a.part, "text": a.text, "saving_s": round(a.saving_s, 3), "every": a.every}
              for a in ledger_advice(slowest) if not slowest.so_far]
    return {**slowest.to_dict(), "advice": advice, "ranks": [led.to_dict() for led in ledgers]}


def duration(seconds: float) -> str:
    """``12.3 s``, ``41 min`` or ``2.1 h``."""
    if seconds < 120:
        return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _difference(led: Ledger, slowest: Ledger) -> str:
    """How much shorter than the slowest rank ``led`` was, and in which part most."""
    if led is slowest:
        return " (slowest)"
    gap = slowest.wall_s - led.wall_s
    part = max(slowest.parts, key=lambda k: slowest.parts[k] - led.parts[k] if k != "unaccounted" else float("-inf"))
    more = slowest.parts[part] - led.parts[part]
    return f" ({gap:.2f} s shorter; the slowest rank's {LABELS[part]} is {more:+.2f} s)"

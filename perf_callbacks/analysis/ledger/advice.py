"""Advice from a rank's ledger (``parts.py``), each with the seconds it would have saved over the run.

- Evaluation or checkpoints whose occurrence (its mean seconds) costs more than ``TARGET_SHARE`` of the median steps
  between two: every N steps instead, N the least interval at which it costs ``TARGET_SHARE`` of N median steps; the
  saving is the part's time less what N steps apart would have cost.
- DataLoader workers started at more than one epoch: ``persistent_workers=True`` saves each start after the first.
- Start-up over ``TARGET_SHARE`` of the wall time, compilation over it of the time after start-up: their seconds, at
  most what moving or caching them saves.

Example:
    >>> from perf_callbacks.analysis.ledger.parts import PARTS, Ledger
    >>> parts = dict.fromkeys(PARTS, 0.0) | {"productive": 10.0, "checkpoint": 10.0}
    >>> led = Ledger(0, 20.0, parts, "process", 100, 0.1, {"checkpoint": 100})
    >>> [(a.part, a.every, round(a.saving_s, 1)) for a in ledger_advice(led)]
    [('checkpoint', 20, 9.5)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perf_callbacks.analysis.ledger.parts import Ledger

__all__ = ["TARGET_SHARE", "LedgerAdvice", "ledger_advice"]
TARGET_SHARE = 0.05
FIX = {"checkpoint": "save a checkpoint every {n} steps (Lightning: ModelCheckpoint(every_n_train_steps={n}); "
                     "transformers: save_steps={n})",
       "evaluation": "evaluate every {n} steps (Lightning: val_check_interval={n}; transformers: eval_steps={n})"}


@dataclass(frozen=True)
class LedgerAdvice:
    """One piece of advice: the ``part`` it shrinks, what to do, and the seconds it would have saved."""

    part: str
    text: str
    saving_s: float
    every: int | None = None


def ledger_advice(led: Ledger, target: float = TARGET_SHARE) -> list[LedgerAdvice]:
    """What ``led`` suggests, largest saving first."""
    out = [a for kind in ("checkpoint", "evaluation") if (a := _interval(led, kind, target)) is not None]
    if len(led.spikes) > 1 and led.parts["worker_startup"] > 0:  # persistent workers start once
        saving = led.parts["worker_startup"] * (len(led.spikes) - 1) / len(led.spikes)
        out.append(LedgerAdvice("worker_startup", f"DataLoader workers started at {len(led.spikes)} epochs "
                                f"({led.parts['worker_startup']:.1f} s): persistent_workers=True would save "
                                f"{saving:.1f} s over this run", saving))
    startup = led.parts["startup_before"] + led.parts["startup"]
    if startup > target * led.wall_s:
        out.append(LedgerAdvice("startup", f"start-up took {startup:.1f} s ({startup / led.wall_s:.0%}) before the "
                                f"first step: work done before training (data preparation, downloads, model "
                                f"construction) done once and cached would save up to {startup:.1f} s", startup))
    if led.parts["compile"] > target * (led.wall_s - startup):  # of the training's time
        c = led.parts["compile"]
        out.append(LedgerAdvice("compile", f"compilation took {c:.1f} s ({c / led.wall_s:.0%}): a compile cache "
                                f"(TORCHINDUCTOR_FX_GRAPH_CACHE=1, torch.compiler mega-cache) would save up to "
                                f"{c:.1f} s on the next run", c))
    return sorted(out, key=lambda a: -a.saving_s)


def _interval(led: Ledger, kind: str, target: float) -> LedgerAdvice | None:
    """Every N steps for a set-aside ``kind`` whose occurrence costs more than ``target`` of the steps between two."""
    count, seconds = led.counts.get(kind, 0), led.parts[kind]
    if not count or led.median_s <= 0 or led.steps < 2:
        return None
    every = max(1, round(led.steps / count))
    per = seconds / count
    if per <= target * every * led.median_s:  # already under the target share of the steps it follows
        return None
    n = max(every + 1, math.ceil(per / (target * led.median_s)))
    saving = seconds * (1 - every / n)
    label = "checkpoints" if kind == "checkpoint" else "evaluation"
    return LedgerAdvice(kind, f"{label} took {seconds:.1f} s ({seconds / led.wall_s:.0%} of the wall time; "
                        f"{count} times, {per * 1000:.0f} ms each, {_every(every)} of {led.median_s * 1000:.0f} ms): "
                        f"{FIX[kind].format(n=n)} would save {saving:.1f} s over this run", saving, n)


def _every(n: int) -> str:
    return "every step" if n == 1 else f"every {n} steps"

"""The machine is not the change: what differs between two runs besides the code (``diff`` says it first).

Compared from each run's step record description (``core/engine/step_log.py``) and its steps: the share of the time
the training thread could run that it waited for a CPU (``cpu_contention``, a difference of ``CONTENTION_POINTS`` or
more), CPU cores,
GPU, torch and framework versions, world size, and the batch (median samples per step).

Only a difference in CPU contention *withholds* the call (:func:`withholds`): it is the machine's load, never a setting
of the run, and it moves step time by itself. The others may be the change being measured (a new torch, a larger
batch): they are said first, with their figures, and the call stands.

Example:
    >>> d = machine_differences({"cpu_contention": 0.82, "machine": {"cpu_cores": 2}},
    ...                         {"cpu_contention": 0.03, "machine": {"cpu_cores": 2}}, 1.0, 1.0)
    >>> [x["text"] for x in d], withholds(d)
    (["CPU contention 82% -> 3% (the training thread's wait for a CPU)"], True)
"""

from __future__ import annotations

from typing import Any

CONTENTION_POINTS = 0.10
"""Two runs whose CPU contention differs by this much (a share of the time the thread could run) or more ran on
machines under different load."""
SETTINGS = (("cpu_cores", "CPU cores"), ("gpu", "GPU"), ("world_size", "world size"), ("torch", "torch"),
            ("lightning", "lightning"), ("pytorch_lightning", "pytorch_lightning"), ("accelerate", "accelerate"),
            ("transformers", "transformers"))


def machine_differences(base: dict[str, Any], new: dict[str, Any], base_batch: float | None,
                        new_batch: float | None) -> list[dict[str, Any]]:
    """What differs, each as ``{what, base, new, text}``: contention first, then the settings, then the batch.

    Args:
        base: the base record's description (``steps-rank{R}.json``).
        new: the new one's.
        base_batch: the base's median samples per step (None: unknown).
        new_batch: the new one's.
    """
    out: list[dict[str, Any]] = []
    a, b = base.get("cpu_contention"), new.get("cpu_contention")
    if isinstance(a, float | int) and isinstance(b, float | int) and abs(b - a) >= CONTENTION_POINTS:
        out.append({"what": "cpu_contention", "base": a, "new": b,
                    "text": f"CPU contention {a:.0%} -> {b:.0%} (the training thread's wait for a CPU)"})
    ma, mb = base.get("machine", {}) or {}, new.get("machine", {}) or {}
    for key, label in SETTINGS:
        x, y = ma.get(key), mb.get(key)
        if (x is not None or y is not None) and x != y:
            out.append({"what": key, "base": x, "new": y, "text": f"{label} {_shown(x)} -> {_shown(y)}"})
    if base_batch and new_batch and base_batch != new_batch:
        out.append({"what": "batch", "base": base_batch, "new": new_batch,
                    "text": f"batch {base_batch:g} -> {new_batch:g} samples per step"})
    return out


def withholds(differences: list[dict[str, Any]]) -> bool:
    """Whether the call is withheld: the runs' CPU contention differs (see the module docstring)."""
    return any(d["what"] == "cpu_contention" for d in differences)


def _shown(x: Any) -> str:
    return "unknown" if x is None else str(x)

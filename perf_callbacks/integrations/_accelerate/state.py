"""Where the Accelerate hook keeps its optimizer-step count across ``save_state`` / ``load_state``.

Two places, so that a resumed run continues the schedule whichever order it uses:

- ``perf_callbacks_state.json`` in the checkpoint folder, written by the save-state pre-hook and read by the
  load-state pre-hook (a ``load_state`` after ``register``);
- the first param group of each optimizer's saved state (``perf_callbacks_optimizer_steps``), which torch's
  ``load_state_dict`` copies into the live optimizer, so ``register`` finds it after a ``load_state`` that came first,
  and removes it from the live param groups.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
STATE_FILE = "perf_callbacks_state.json"
COUNT_KEY = "perf_callbacks_optimizer_steps"


def write_state(output_dir: str, steps: int) -> None:
    """Write the count next to the checkpoint, atomically; on failure no temporary file is left."""
    path = Path(output_dir) / STATE_FILE
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.partial")
    try:
        tmp.write_text(json.dumps({"optimizer_steps": steps}))
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from err  # the file meant, not our temporary name


def read_state(input_dir: str, current: int) -> int | None:
    """The count saved with the checkpoint in ``input_dir``, or None (with a log line) when there is none."""
    path = Path(input_dir) / STATE_FILE
    try:
        return int(json.loads(path.read_text())["optimizer_steps"])
    except FileNotFoundError:
        log.warning("perf-callbacks: %s has no %s; optimizer steps are counted from %d", input_dir, STATE_FILE, current)
    except (ValueError, KeyError, TypeError, OSError) as err:
        log.warning("perf-callbacks: could not read %s (%s); the step count is unchanged", path, err)
    return None


def put_count(state: dict[str, Any], steps: int) -> dict[str, Any]:
    """Store the count in a saved optimizer state's first param group."""
    for group in state.get("param_groups", [])[:1]:
        group[COUNT_KEY] = steps
    return state


def take_count(optimizer: Any) -> int | None:
    """Remove the count that a loaded optimizer state put into the live param groups; return it."""
    counts = [g.pop(COUNT_KEY) for g in getattr(optimizer, "param_groups", []) if COUNT_KEY in g]
    return int(max(counts)) if counts else None

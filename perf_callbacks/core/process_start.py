"""How long ago this process started: the ledger's origin (``core/engine/ledger_stamps.py``).

Linux gives the start in ``/proc/self/stat`` (field 22, in clock ticks since boot) and the time since boot in
``/proc/uptime``; elsewhere ``psutil`` when it is installed gives the start on the wall clock. None when neither
answers: the ledger then starts at the callback's construction, and says so.

Example:
    >>> age = process_age_s()
    >>> age is None or age >= 0
    True
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["process_age_s"]


def process_age_s() -> float | None:
    """Seconds since this process started (None where it cannot be read)."""
    try:
        return _proc_age()
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil  # type: ignore[import-untyped, unused-ignore]

        return max(time.time() - float(psutil.Process().create_time()), 0.0)
    except Exception:  # noqa: BLE001 - an origin is not worth a failure
        return None


def _proc_age() -> float:
    stat = Path("/proc/self/stat").read_text(encoding="ascii")
    fields = stat[stat.rindex(")") + 2:].split()  # the name may hold spaces: count after its closing parenthesis
    start_ticks = float(fields[19])  # field 22 of the whole line
    uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
    return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)

"""The verdicts a window or rank can get, as a type: ``Verdict``, and ``VERDICTS``, its values in report order.

Example:
    >>> VERDICTS[0], "input_bound" in VERDICTS, len(VERDICTS)
    ('compute_bound', True, 8)
"""

from __future__ import annotations

from typing import Literal, get_args

Verdict = Literal[
    "compute_bound",
    "input_bound",
    "host_bound",
    "sync_bound",
    "copy_bound",
    "communication_bound",
    "unexplained_idle",
    "cpu_contention",
]
"""The cause of the largest removable loss (:mod:`perf_callbacks.analysis.judge.verdict`), ``compute_bound`` without
one; the JSON's ``verdict`` and ``runner_up``."""

VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
"""Every ``Verdict``, ``compute_bound`` first."""

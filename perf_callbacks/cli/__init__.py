"""The command line, ``perf-callbacks report | diff | nsys | capture``: ``main`` and its exit codes.

``main`` is in ``cli/main.py``, each subcommand in a module of its own, what they share in ``cli/common.py``, and the
reads from object storage in ``cli/remote_read.py``.
"""

from __future__ import annotations

from perf_callbacks.cli.common import (
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_PIPE,
    EXIT_REMOTE,
)
from perf_callbacks.cli.main import main

__all__ = ["EXIT_FAILED", "EXIT_INTERNAL", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PARTIAL", "EXIT_PIPE", "EXIT_REMOTE",
           "main"]

"""Config errors under LightningCLI: one ``error:`` line and exit status 2, like jsonargparse's own parse errors.

LightningCLI (jsonargparse) checks types while parsing, then calls ``GPUPerfCallback(**init_args)``. It wraps any
exception from that call in a "Does not validate against any of the Union subtypes" ``ValueError`` chained to ours,
so the user would read 80 lines of tracebacks. jsonargparse's own parse errors print ``error: <message>`` and exit 2
instead, unless the parser was built with ``exit_on_error=False`` or ``JSONARGPARSE_DEBUG=true`` is set; we do the
same, and in those two cases raise the ``PerfConfigError`` as it is, with its traceback.

Example:
    >>> config_or_exit({"top_k": 3}, "GPUPerfCallback").top_k
    3
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Mapping
from typing import Any

from perf_callbacks.config import PerfConfig
from perf_callbacks.exceptions import PerfConfigError


def config_or_exit(options: Mapping[str, Any], owner: str) -> PerfConfig:
    """``PerfConfig.from_dict(options)``; under a jsonargparse parser that exits on error, a bad option exits 2."""
    try:
        return PerfConfig.from_dict(options)
    except PerfConfigError as err:
        if not _exits_on_error(_root_parser()):
            raise
        sys.stderr.write(f"error: {owner}: {err}\n")
        raise SystemExit(2) from err


def _root_parser() -> Any | None:
    """The outermost jsonargparse parser on the call stack (the one LightningCLI built), if any."""
    jsonargparse = sys.modules.get("jsonargparse")
    parser_type = getattr(jsonargparse, "ArgumentParser", None)
    if parser_type is None:
        return None
    root = None
    frame = inspect.currentframe()
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, parser_type):
            root = owner
        frame = frame.f_back
    return root


def _exits_on_error(parser: Any | None) -> bool:
    if parser is None or not getattr(parser, "exit_on_error", False):
        return False
    return os.environ.get("JSONARGPARSE_DEBUG", "").lower() != "true"

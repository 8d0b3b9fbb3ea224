"""Reading a config file as LightningCLI would: YAML 1.2 numbers, and one clear ``PerfConfigError`` for any problem.

PyYAML implements YAML 1.1, where ``1e3`` and ``5e-1`` are strings; jsonargparse (LightningCLI) reads them as numbers.
The loader here resolves them as floats too, so a file means the same to both. Duplicate keys, which PyYAML silently
resolves to the last one, are an error.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "perf.yaml"
    >>> _ = path.write_text(chr(10).join(["max_trace_mb: 1e3", "degradation_threshold: 5e-1"]))
    >>> load_yaml(path)
    {'max_trace_mb': 1000.0, 'degradation_threshold': 0.5}
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from perf_callbacks.exceptions import PerfConfigError

_FLOAT_1_2 = re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


class _Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no type stubs here
    """SafeLoader with YAML 1.2 exponent floats and an error on duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_1_2, list("-+0123456789."))


def load_yaml(path: str | os.PathLike[str]) -> Any:
    """The file's content; ``PerfConfigError`` naming the file (and the line) when it cannot be read or parsed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
        raise PerfConfigError(f"{path}: cannot read the config file: {reason}") from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        raise PerfConfigError(_syntax_error(path, err)) from None


def _syntax_error(path: str | os.PathLike[str], err: Exception) -> str:
    mark = getattr(err, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    return f"{where}: invalid YAML: {problem}" + (f" ({context})" if context else "")

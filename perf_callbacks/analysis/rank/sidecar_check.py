"""Whether a sidecar's content can stand in for parsing its trace: every field of the rank result has its type.

A sidecar that matches its trace by name and size can still hold anything (written by another version, edited, or
damaged on disk). ``rank_from_sidecar`` rebuilds the ``RankResult`` only when every field has the type the analysis
expects, down to the entries of ``steps``, ``top_ops`` and ``devices``, and a value a trace can give (finite, shares in
[0, 1], times, bytes, counts and FLOPs >= 0: :mod:`~perf_callbacks.analysis.rank.sidecar_values`); otherwise it returns
None and the trace is parsed, as for a stale sidecar.
"""

from __future__ import annotations

import types
from dataclasses import MISSING
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from perf_callbacks.analysis.measures.check import measures_valid
from perf_callbacks.analysis.rank.sidecar_values import values_sound
from perf_callbacks.analysis.results.parts import Measures, MemoryParts, json_hints
from perf_callbacks.analysis.results.result import RankResult
from perf_callbacks.analysis.results.verdicts import VERDICTS

_REQUIRED_PARTS = {"peak_memory_bytes", "device_memory_bytes"}  # the memory part's keys every sidecar has
_TOP_OP = {"name": str, "device": str, "self_time_us": float, "count": int, "fraction": float}
_DEVICE = {"device": int, "gpu_utilization": float | None, "losses": dict[str, float],
           "kernels_per_step": float | None, "top_kernels": list[dict[str, Any]]}
_KERNEL = {"name": str}
_STEP = {"step": int, "time_ms": float, "causes_ms": dict[str, float]}
_RECOMMENDATION = {"cause": str, "text": str, "estimated_gain_ms": float | None,
                   "estimated_gain_fraction": float | None, "basis": str}


def rank_from_sidecar(side: dict[str, Any]) -> RankResult | None:
    """The sidecar's rank result, or None when its ``rank`` or ``meta`` does not have the expected shape.

    Example:
        >>> rank_from_sidecar({"rank": {"rank": {"rank": 0}}}) is None
        True
    """
    data, meta = side.get("rank"), side.get("meta", {})
    if not isinstance(data, dict) or not isinstance(meta, (dict, type(None))) or not _valid(data):
        return None
    return RankResult.from_dict(data)


def _valid(data: dict[str, Any]) -> bool:
    hints = _hints()
    fields = RankResult.__dataclass_fields__.items()
    required = {k for k, f in fields if f.default is MISSING and f.default_factory is MISSING} | _REQUIRED_PARTS
    if not required <= data.keys():
        return False
    if not all(_fits(v, hints[k]) for k, v in data.items() if k in hints and k != "timeline"):
        return False
    return (data.get("verdict", VERDICTS[0]) in VERDICTS
            and all(_entry(s, _STEP) for s in data["steps"])
            and all(_entry(x, _RECOMMENDATION) for x in data.get("recommendations", []))
            and all(_entry(op, _TOP_OP) for op in data["top_ops"])
            and all(_entry(d, _DEVICE) and all(_entry(k, _KERNEL) for k in d["top_kernels"])
                    for d in data.get("devices", []))
            and measures_valid(data, _fits)
            and values_sound(data))


def _entry(value: dict[str, Any], schema: dict[str, Any]) -> bool:
    return all(key in value and _fits(value[key], hint) for key, hint in schema.items())


@cache
def _hints() -> dict[str, Any]:
    hints = get_type_hints(RankResult)
    del hints["memory"], hints["measures"]
    hints.update(json_hints(MemoryParts))
    hints.update(json_hints(Measures))
    hints["steps"] = hints["recommendations"] = list[dict[str, Any]]
    return hints


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value has the type ``hint`` (a bool is no number, an int is a float)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is Literal:  # a verdict: one of the type's values
        return type(value) is str and value in args
    if origin is list:
        if args[0] in (float, int):  # long lists of numbers (a memory curve): one pass, no recursion
            kinds = (int, float) if args[0] is float else (int,)
            return isinstance(value, list) and all(type(v) in kinds for v in value)
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if origin is dict and args == (str, Any):  # entries whose keys are checked by their own schema
        return isinstance(value, dict) and all(type(k) is str for k in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
    if isinstance(value, bool):
        return hint is bool
    return isinstance(value, (int, float) if hint is float else hint)

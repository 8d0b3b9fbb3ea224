"""What the communication, transfer and launch figures share: the window test, percentiles, sizes and rates."""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod
from statistics import median
from typing import Any

from perf_callbacks.analysis.trace.aside import within
from perf_callbacks.analysis.trace.intervals import Span
from perf_callbacks.analysis.trace.timeline import Timeline

DTYPE_BYTES = {
    "float": 4, "double": 8, "half": 2, "bfloat16": 2, "long": 8, "int": 4, "short": 2, "char": 1, "byte": 1,
    "bool": 1, "complexfloat": 8, "complexdouble": 16, "complexhalf": 4, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "qint8": 1, "quint8": 1, "qint32": 4,
    # C++ spellings of ``Input type`` (record_shapes=True)
    "float32": 4, "float64": 8, "float16": 2, "c10::half": 2, "c10::bfloat16": 2, "long int": 8, "int64_t": 8,
    "short int": 2, "signed char": 1, "unsigned char": 1, "int8_t": 1, "uint8_t": 1, "int32_t": 4, "int16_t": 2,
}
"""Bytes per element of the ``dtype`` names in Kineto collective arguments and of ``Input type`` names."""


@dataclass
class InWindow:
    """Whether an event belongs to the window: it starts in ``[lo, hi)`` and outside the time set aside."""

    lo: float
    hi: float
    aside: list[Span]

    @classmethod
    def of(cls, tl: Timeline) -> InWindow:
        """The window of a timeline."""
        return cls(tl.lo, tl.hi, tl.aside)

    def __call__(self, ts: float) -> bool:
        """Whether an event starting at ``ts`` is counted."""
        return self.lo <= ts < self.hi and not (self.aside and within(self.aside, ts))


def p50(values: list[float]) -> float | None:
    """The median, None for no values."""
    return median(values) if values else None


def p95(values: list[float]) -> float | None:
    """The 95th percentile by nearest rank (the smallest value with at least 95% of the values at or below it).

    Example:
        >>> p95(list(range(1, 101)))
        95
    """
    if not values:
        return None
    return sorted(values)[ceil(0.95 * len(values)) - 1]


def element_bytes(dtype: Any) -> int | None:
    """Bytes per element of a dtype name (``Float``, ``BFloat16``, ``c10::Half``...), None when unknown.

    Example:
        >>> element_bytes("BFloat16"), element_bytes("float"), element_bytes("Quux")
        (2, 4, None)
    """
    return DTYPE_BYTES.get(dtype.lower()) if isinstance(dtype, str) else None


def tensor_bytes(dims: Any, dtype: Any) -> int | None:
    """Bytes of one tensor from its ``Input Dims`` entry (a list of ints) and its type name; None when unknown."""
    size = element_bytes(dtype)
    if size is None or not isinstance(dims, list) or not all(isinstance(d, int) and d >= 0 for d in dims):
        return None
    return prod(dims) * size


def gbps(nbytes: float | None, us: float) -> float | None:
    """Gigabytes (1e9 bytes) per second, None without a size or a duration."""
    return None if nbytes is None or us <= 0 else nbytes / us / 1e3


def number(value: Any) -> int | None:
    """A non-negative int argument, None otherwise (a bool, a string, a float, a negative number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

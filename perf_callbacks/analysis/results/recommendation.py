"""A recommendation as data: its text (the ``str`` itself), the cause it addresses, and what removing it would gain.

The gains are computed in :mod:`perf_callbacks.analysis.judge.gains`; this module holds only the value, so the results
(:mod:`perf_callbacks.analysis.results.result`) can hold it and read it back from JSON.

Example:
    >>> rec = Recommendation("remove .item()", "sync", 13.8, 0.294, "the device idle after syncs; upper bound")
    >>> rec.startswith("remove"), rec.to_dict()["estimated_gain_ms"], Recommendation.of(rec.to_dict()) == rec
    (True, 13.8, True)
"""

from __future__ import annotations

from typing import Any, Literal, get_args

PageableCopy = Literal["HtoD/pageable", "DtoH/pageable"]
"""The copy kinds (the timeline's names) whose measured rates can back a copy recommendation: host-device copies from
pageable memory (:func:`perf_callbacks.analysis.measures.copies.copy_advice`)."""
PAGEABLE_COPIES: tuple[PageableCopy, ...] = get_args(PageableCopy)


class Recommendation(str):
    """One recommendation: its text (the string itself), the cause it addresses and what removing it would gain.

    Args:
        text: the recommendation's words.
        cause: the loss it removes (``input``, ``sync``, ``host``, ``copy``, ``communication``, ``other``,
            ``cpu_contention``), or ``compute``, ``straggler``, or a note (``profiler``, ``backlog``, ``memory``).
        estimated_gain_ms: milliseconds per step the fix would save at most, None when no measurement backs one.
        estimated_gain_fraction: the same as a share of the median step time.
        basis: one sentence naming the measurement the gain comes from, or why there is none.
        copy_kinds: the pageable copy kinds it advises on by name (a ``copy`` recommendation's ``HtoD/pageable 12.3 ms:
            ...``): those its measured rates are added to. Not in the JSON: a rank read back from its sidecar gets them
            from its copy figures (:meth:`perf_callbacks.analysis.results.result.RankResult.from_dict`).
    """

    cause: str
    estimated_gain_ms: float | None
    estimated_gain_fraction: float | None
    basis: str
    copy_kinds: tuple[PageableCopy, ...]

    def __new__(cls, text: str, cause: str, estimated_gain_ms: float | None = None,
                estimated_gain_fraction: float | None = None, basis: str = "",
                copy_kinds: tuple[PageableCopy, ...] = ()) -> Recommendation:
        """The recommendation ``text`` for ``cause``, with its gain and the basis of the gain."""
        self = super().__new__(cls, text)
        self.cause, self.basis, self.copy_kinds = cause, basis, copy_kinds
        self.estimated_gain_ms, self.estimated_gain_fraction = estimated_gain_ms, estimated_gain_fraction
        return self

    def retext(self, text: str) -> Recommendation:
        """The same cause, gain and copy kinds with other words (a rank prefix, measured rates added)."""
        return Recommendation(text, self.cause, self.estimated_gain_ms, self.estimated_gain_fraction, self.basis,
                              self.copy_kinds)

    def naming(self, copy_kinds: tuple[PageableCopy, ...]) -> Recommendation:
        """The same recommendation, advising on ``copy_kinds`` by name."""
        return Recommendation(str(self), self.cause, self.estimated_gain_ms, self.estimated_gain_fraction, self.basis,
                              copy_kinds)

    def to_dict(self) -> dict[str, Any]:
        """``{cause, text, estimated_gain_ms, estimated_gain_fraction, basis}``: the JSON's recommendation."""
        return {"cause": self.cause, "text": str(self), "estimated_gain_ms": self.estimated_gain_ms,
                "estimated_gain_fraction": self.estimated_gain_fraction, "basis": self.basis}

    @classmethod
    def of(cls, value: Any) -> Recommendation:
        """A recommendation from its JSON dict, itself, or a plain string (whose gain nothing measured)."""
        if isinstance(value, Recommendation):
            return value
        if isinstance(value, dict):
            return cls(str(value.get("text", "")), str(value.get("cause", "")), _number(value.get("estimated_gain_ms")),
                       _number(value.get("estimated_gain_fraction")), str(value.get("basis", "")))
        return cls(str(value), "", None, None, "no measurement backs a gain for this recommendation")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled between processes (collect.py's parallel parse)
        return (Recommendation, (str(self), self.cause, self.estimated_gain_ms, self.estimated_gain_fraction,
                                 self.basis, self.copy_kinds))


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def pageable_copies(kinds: list[str]) -> tuple[PageableCopy, ...]:
    """The pageable copy kinds among ``kinds``.

    Example:
        >>> pageable_copies(["DtoD/device", "DtoH/pageable", "HtoD/pageable"])
        ('HtoD/pageable', 'DtoH/pageable')
    """
    return tuple(k for k in PAGEABLE_COPIES if k in kinds)


def recommendation_dicts(recs: list[Any]) -> list[dict[str, Any]]:
    """The JSON's ``recommendations``: ``[{cause, text, estimated_gain_ms, estimated_gain_fraction, basis}]``."""
    return [Recommendation.of(x).to_dict() for x in recs]

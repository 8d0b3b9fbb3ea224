"""The HTML report's recommendations: a numbered table with each one's estimated gain and the basis of the gain."""

from __future__ import annotations

from html import escape
from typing import Any

from perf_callbacks.analysis.judge.gains import gain_label
from perf_callbacks.analysis.results.recommendation import Recommendation


def recommendations_table(recs: list[Any]) -> str:
    """``<table>`` of the recommendations, largest estimated gain first: #, estimated gain, recommendation, basis.

    Example:
        >>> "up to -20% step time" in recommendations_table([Recommendation("x", "sync", 2.0, 0.2, "upper bound")])
        True
    """
    rows = "".join(f"<tr><td>{i}</td><td>{escape(gain_label(rec))}</td><td>{escape(rec)}</td>"
                   f"<td>{escape(rec.basis)}</td></tr>" for i, rec in enumerate(map(Recommendation.of, recs), 1))
    return "<table><tr><th>#</th><th>estimated gain</th><th>recommendation</th><th>basis of the estimate</th></tr>" \
           f"{rows}</table>"

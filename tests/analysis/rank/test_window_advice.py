"""``window_advice`` adds the measured rates to the recommendation that advises on the copies by kind: chosen by its
``copy_kinds``, never by its words; and a rank read back from its sidecar chooses the same one."""

from __future__ import annotations

import json
import pickle
from typing import Any

from perf_callbacks.analysis.measures.copies import copy_advice
from perf_callbacks.analysis.rank.measures import window_advice
from perf_callbacks.analysis.rank.sidecar_check import rank_from_sidecar
from perf_callbacks.analysis.results.parts import Measures
from perf_callbacks.analysis.results.recommendation import Recommendation
from perf_callbacks.analysis.results.result import RankResult
from tests.analysis.result_helpers import rank

_ROWS = [{"kind": "HtoD", "memory": "pageable", "count": 10, "bytes": 20_000_000, "total_ms": 20.0, "gbps": 1.0},
         {"kind": "HtoD", "memory": "pinned", "count": 1, "bytes": 10_000_000, "total_ms": 0.4, "gbps": 25.0}]


def slow_copies(**fields: Any) -> RankResult:
    """A judged rank whose pageable HtoD copies ran at 1 GB/s against 25 pinned, 20% of its window exposed."""
    return rank(**{"losses": {"copy": 0.2}, "measures": Measures(copies=_ROWS), "copy_exposed_ms": {"HtoD/pageable": 20.0}, **fields})


def rates(r: RankResult) -> str:
    [(kind, measured, _)] = copy_advice(r)
    assert kind == "HtoD/pageable"
    return measured


def test_the_rates_go_to_the_recommendation_that_names_the_kind_by_field_not_by_text() -> None:
    r = slow_copies()
    plain = Recommendation("copies took a fifth of the step: pin them", "copy", 4.0, 0.2, "the exposed copies",
                           ("HtoD/pageable",))
    [out] = window_advice([r], [plain])
    assert out == f"{plain} (measured: {rates(r)})"
    assert (out.cause, out.estimated_gain_ms, out.basis, out.copy_kinds) == ("copy", 4.0, "the exposed copies",
                                                                             ("HtoD/pageable",))
    decoy = Recommendation("a note that mentions HtoD/pageable copies", "memory")  # the words, not the field
    out2 = window_advice([r], [decoy])
    assert out2[0] == decoy and len(out2) == 2 and out2[1].startswith("HtoD copies from pageable memory ran at")


def test_the_judged_copy_recommendation_gets_the_rates() -> None:
    r = slow_copies()
    [rec] = r.recommendations
    assert rec.copy_kinds == ("HtoD/pageable",)
    [out] = window_advice([r], r.recommendations)
    assert out == f"{rec} (measured: {rates(r)})"
    prefixed = [x.retext(f"rank 0: {x}") for x in r.recommendations]  # the window's copy of a rank's advice
    assert window_advice([r], prefixed) == [f"rank 0: {rec} (measured: {rates(r)})"]


def test_copy_kinds_survive_json_and_pickle_without_a_new_key() -> None:
    r = slow_copies()
    data = json.loads(json.dumps(r.to_dict()))
    assert set(data["recommendations"][0]) == {"cause", "text", "estimated_gain_ms", "estimated_gain_fraction",
                                               "basis"}  # the JSON's keys are as before: sidecars of either version
    back = rank_from_sidecar({"rank": data, "meta": {}})
    assert back is not None
    assert back.recommendations == r.recommendations
    assert [x.copy_kinds for x in back.recommendations] == [("HtoD/pageable",)]
    assert window_advice([back], back.recommendations) == window_advice([r], r.recommendations)
    assert pickle.loads(pickle.dumps(r.recommendations[0])).copy_kinds == ("HtoD/pageable",)

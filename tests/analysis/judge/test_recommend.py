"""The advice quotes the report's tables: the collectives' advice names and times them as the collectives table does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, format_text
from perf_callbacks.analysis.results.result import AnalysisResult
from tests.analysis.conftest import kernel, launch, write_trace, x
from tests.foreign import HTA, needs_foreign

GENERIC = "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"


def _comm_advice(result: AnalysisResult) -> str:
    return next(r for r in result.recommendations if r.startswith("collectives"))


def _quotes_the_table(result: AnalysisResult) -> None:
    """Each collective the advice names has the table's time (summed over its rows); the totals are the table's."""
    advice, rows = _comm_advice(result), result.measures.communication
    named = dict(re.findall(r"(\w+) ([\d.]+) ms", advice.split(") were exposed")[0]))
    assert named, advice
    for name, ms in named.items():
        assert ms == f"{sum(r['total_ms'] for r in rows if r['name'] == name):.1f}", (name, advice)
    assert f"({sum(r['total_ms'] for r in rows):.1f} ms in collectives, " \
           f"{sum(r['exposed_ms'] for r in rows):.1f} ms exposed)" in advice, advice


def test_the_advice_names_a_generic_kernel_as_the_table_does(tmp_path: Path) -> None:
    """NCCL 2.19+ runs collectives as ``ncclDevKernel_Generic``: the table names it by its record_param_comms op."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 1000)]
    for i, ts in enumerate((10, 500)):
        ext = {"External id": 7 + i}
        events += [x("cpu_op", "record_param_comms", ts - 5, 20, **ext, **{"Collective name": "allreduce",
                                                                          "In msg nelems": 1024, "dtype": "Float"}),
                   {**launch(ts, i + 1), "args": {"correlation": i + 1, **ext}}, kernel(ts + 10, 400, i + 1, GENERIC)]
    events += [launch(950, 9), kernel(960, 30, 9)]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events), sidecars=False)
    assert [r["name"] for r in result.measures.communication] == ["AllReduce"]
    assert "Generic" not in _comm_advice(result)
    _quotes_the_table(result)


@needs_foreign
@pytest.mark.parametrize("name", ["nccl_parser_config/nccl_data.json.gz",
                                  "negative_queue_length_values_check/rank0.json.gz",
                                  "trace_diff/control/control.json.gz"])
def test_the_collectives_advice_quotes_the_collectives_table(name: str) -> None:
    """nccl_data printed "48.2 ms in collectives" next to a 46.9 ms table; the older torch's SendRecv kernels were
    named by their kernel in the advice and by their annotation (AllToAll) in the table."""
    result = analyze(HTA / name, sidecars=False)
    _quotes_the_table(result)
    assert _comm_advice(result) in format_text(result)

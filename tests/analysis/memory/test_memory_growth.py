"""What a window kept across steps (``analysis/memory/growth.py``), on hand-made memory events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis.memory.growth import META_KEY, growth_lines, growth_meta, kept_alive
from perf_callbacks.analysis.trace.events import RankTrace

GROWTH = {"bytes_per_step": 2e6, "since_step": 6, "until_step": 24}
STEPS = [(30, 0.0, 10.0, 1), (31, 10.0, 20.0, 1), (32, 20.0, 30.0, 1)]


def trace(meta: dict[str, Any] | None = None) -> RankTrace:
    return RankTrace(path=Path("t"), meta={META_KEY: GROWTH} if meta is None else meta, steps=STEPS)


def alloc(ts: float, nbytes: int, addr: int) -> tuple[float, int, int, int, int, int]:
    return (ts, 1, nbytes, 0, 0, addr)


def test_only_a_run_whose_memory_grew_gets_a_finding() -> None:
    events = [alloc(1.0, 100, 1), alloc(11.0, 100, 2)]
    assert kept_alive(trace({}), events, ["aten::sub"] * 2, "host") is None
    for bad in ({"bytes_per_step": "2e6", "since_step": 1, "until_step": 2}, {"bytes_per_step": -1.0},
                {"bytes_per_step": float("nan"), "since_step": 1, "until_step": 2}, [1, 2]):
        assert growth_meta({META_KEY: bad}) is None


def test_a_prefetched_batch_freed_a_step_later_is_not_kept_and_a_leak_is() -> None:
    """The batch of step k+1, made in step k, is freed in step k+2: alive at the end of the next step, not at the end
    of the window. The leak (one allocation a step, never freed) is named, at its size per step."""
    events = [alloc(1.0, 4096, 10), alloc(2.0, 2_000_000, 1),  # step 30: next batch, leak
              alloc(11.0, 4096, 11), alloc(12.0, 2_000_000, 2),  # step 31
              (21.0, 1, -4096, 0, 0, 10), alloc(22.0, 4096, 12), (23.0, 1, -4096, 0, 0, 11)]  # step 32 frees
    owners = ["aten::cat", "aten::sub", "aten::cat", "aten::sub", None, "aten::cat", None]
    found = kept_alive(trace(), events, owners, "host")
    assert found is not None
    assert found["by_op"] == [{"name": "aten::sub", "bytes_per_step": 2_000_000.0}]
    assert found["kept_per_step"] == 2_000_000.0  # the batches made in steps 30 and 31 were freed by the window's end
    assert found["steps"] == [30, 31] and found["bytes_per_step"] == 2e6


def test_an_op_that_kept_memory_in_one_step_only_is_not_named() -> None:
    events = [alloc(1.0, 5_000_000, 1), alloc(2.0, 1_000_000, 2), alloc(12.0, 1_000_000, 3)]
    found = kept_alive(trace(), events, ["aten::empty", "aten::mul", "aten::mul"], "device")
    assert found is not None and [r["name"] for r in found["by_op"]] == ["aten::mul"]


@pytest.mark.parametrize(("events", "why"), [
    ([alloc(1.0, 100, None)], "profile_memory=True"),  # type: ignore[arg-type]
    ([alloc(1.0, 100, 1), (2.0, 1, -100, 0, 0, 1)], "outside torch's allocator"),
])
def test_a_growth_with_nothing_kept_in_the_window_says_why(events: list[Any], why: str) -> None:
    found = kept_alive(trace(), events, [None] * len(events), "host")
    lines = growth_lines(found)
    assert lines[0].startswith("memory growth: the memory held at step start grew 2.0 MB per step")
    assert "none found" in lines[1] and why in lines[1]


def graph_trace(backwarded: set[int]) -> RankTrace:
    """Steps 30-32, each with two forward ops (sequence numbers 2k, 2k+1) around 1-2 and 2-3 ms into the step, and the
    backward evaluations of the numbers in ``backwarded``."""
    t = trace()
    for k, lo in enumerate((0.0, 10.0, 20.0)):
        t.extra.seq_ops += [(lo + 1.0, lo + 2.0, 1, 2 * k, False), (lo + 2.5, lo + 3.0, 1, 2 * k + 1, False)]
    t.extra.seq_ops += [(25.0, 26.0, 1, seq, True) for seq in sorted(backwarded)]
    return t


def test_the_report_line_names_the_op_its_rate_and_the_fix() -> None:
    """Each step keeps a tensor from each of two forward ops whose backward never ran: a graph kept, `.detach()`."""
    events = [alloc(1.5, 2_100_000, 1), alloc(2.7, 4, 2), alloc(11.5, 2_100_000, 3), alloc(12.7, 4, 4)]
    owners = ["aten::mul", "aten::mean"] * 2
    found = kept_alive(graph_trace(set()), events, owners, "device")
    assert found is not None and found["graph_kept"]
    assert growth_lines(found)[1] == (
        "  2.1 MB per step kept alive from aten::mul (steps 30-31 of this window onward): a tensor kept across steps "
        "with its graph (a loss appended to a list? use `.detach()` or `.item()`)")
    assert growth_lines(None) == []


@pytest.mark.parametrize("backwarded", [{0, 1, 2, 3}, {1, 3}])
def test_a_kept_tensor_without_a_graph_gets_no_detach_advice(backwarded: set[int]) -> None:
    """Backward ran through the ops that made what is kept (its graph's saved tensors freed: `.detach()` frees
    nothing more), or only one op's output is kept: the op is named, with no word of `.detach()`."""
    events = [alloc(1.5, 2_100_000, 1), alloc(2.7, 4, 2), alloc(11.5, 2_100_000, 3), alloc(12.7, 4, 4)]
    found = kept_alive(graph_trace(backwarded), events, ["aten::clamp_min", "aten::mean"] * 2, "device")
    assert found is not None and not found["graph_kept"]
    line = growth_lines(found)[1]
    assert line.startswith("  2.1 MB per step kept alive from aten::clamp_min (steps 30-31 of this window onward): ")
    assert "use `.detach()`" not in line and "still referenced" in line


def test_an_op_that_keeps_a_sliver_of_the_growth_is_not_named() -> None:
    """A 4-byte loss kept each step while the memory grows 2 MB a step: under 10% of the growth, not named."""
    events = [alloc(1.5, 4, 1), alloc(11.5, 4, 2)]
    found = kept_alive(trace(), events, ["aten::nll_loss_forward"] * 2, "host")
    assert found is not None and found["by_op"] == [] and found["kept_per_step"] == 4.0
    line = growth_lines(found)[1]
    assert "none found" in line and "no op kept 10% of the growth or more (0.2 MB per step)" in line
    assert "all ops together kept 4 B a step" in line
    assert "nll_loss" not in line
    grown = kept_alive(trace(), [alloc(1.5, 200_000, 1), alloc(11.5, 200_000, 2)], ["aten::mul"] * 2, "host")
    assert grown is not None and [r["name"] for r in grown["by_op"]] == ["aten::mul"]  # 10% of it: named


def test_a_sidecar_with_a_damaged_finding_is_not_read() -> None:
    from perf_callbacks.analysis.measures.check import measures_valid
    from perf_callbacks.analysis.rank.sidecar_check import _fits

    events = [alloc(1.0, 2_100_000, 1), alloc(11.0, 2_100_000, 2)]
    found = kept_alive(trace(), events, ["aten::mul", "aten::mul"], "device")
    assert measures_valid({"memory_growth": found}, _fits) and measures_valid({"memory_growth": None}, _fits)
    assert found is not None
    for damaged in ({**found, "by_op": [{"name": "aten::mul"}]}, {**found, "steps": "30-31"},
                    {k: v for k, v in found.items() if k != "since_step"}):
        assert not measures_valid({"memory_growth": damaged}, _fits)

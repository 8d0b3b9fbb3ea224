"""Memory growth in a real Lightning run on CPU: features kept every step with their graph, then detached.

With the graph: the warning opens a window (the schedule has none left), which names the ops whose allocations stay
alive and says `.detach()`. Detached: the growth left (the features themselves) is told at its own rate, its op named
with no word of `.detach()` (which shares the storage and frees nothing). Both in one child process
(``growth_lit_helpers.run_in_child``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integrations.growth_lit_helpers import BATCH, OUT, run_in_child

pytestmark = pytest.mark.slow  # 2 x 240 Lightning steps: the growth is told once it went on 200 steps
PROBE = BATCH * OUT * 4  # the probe's output, 1 MiB a step


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_in_child(tmp_path_factory.mktemp("lit-growth"))


def test_features_kept_with_their_graph_open_a_window_that_names_the_ops_and_says_detach(
        runs: dict[str, Any]) -> None:
    run = runs["graph"]
    (message,) = run["warnings"]
    assert message.endswith("; steps 222-224 are profiled now to name the operator that allocates what is kept")
    assert run["windows"] == ["window-000006-000008", "window-000222-000224"]  # the capture, after the schedule's
    found = run["found"]
    assert found is not None and found["graph_kept"] and found["steps"] == [222, 223]
    assert abs(run["rate"] - found["kept_per_step"]) / found["kept_per_step"] < 0.10, (run["rate"], found)
    rows = {r["name"]: r["bytes_per_step"] for r in found["by_op"]}
    assert rows.get("aten::addmm") == PROBE and "aten::clamp_min" in rows, rows  # the output and a ReLU it saved
    assert "1.0 MB per step kept alive from aten::addmm (steps 222-223 of this window onward): a tensor kept " \
           "across steps with its graph (a loss appended to a list? use `.detach()` or `.item()`)" in run["text"]
    assert "the memory growth warning at step 221" in run["text"]


def test_detached_features_are_told_at_their_own_rate_with_no_detach_advice(runs: dict[str, Any]) -> None:
    run = runs["detached"]
    assert run["probe_bytes"] == PROBE
    (message,) = run["warnings"]
    assert abs(run["rate"] - PROBE) / PROBE < 0.10, run["rate"]  # the growth left: the features, 1 MiB a step
    assert f"grows by {run['rate'] / 1e6:.2f} MB per step" in message
    found = run["found"]
    assert found is not None and not found["graph_kept"]
    assert found["by_op"] == [{"name": "aten::addmm", "bytes_per_step": float(PROBE)}]
    line = next(line for line in run["text"].splitlines() if "kept alive from" in line)
    assert "use `.detach()`" not in line and "`.detach()` would not free it" in line, line

"""Memory that grows step after step, in a real Accelerate loop on CPU: a loss kept with its graph every step.

The run warns once with the growth per step (within 10% of what the kept graphs hold, summed from their saved
tensors), the window after the warning names the op that allocated what is kept, and the same loop that keeps
``loss.detach()`` says nothing. Both run in one child process (see ``growth_helpers.run_in_child``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integrations.growth_helpers import BATCH, OUT, run_in_child

pytestmark = pytest.mark.slow  # 234 steps a run: the growth is told only once it went on 200 steps


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_in_child(tmp_path_factory.mktemp("growth"))


def test_a_loss_kept_with_its_graph_warns_once_with_its_growth_and_the_window_names_its_op(
    runs: dict[str, Any],
) -> None:
    leak = runs["leak"]
    true = leak["true"]
    assert true >= BATCH * OUT * 4  # the test keeps what it means to: at least the 2 MiB of `out - y` a step
    assert len(leak["warnings"]) == 1, leak["warnings"]
    assert leak["rate"] is not None and abs(leak["rate"] - true) / true < 0.10, (leak["rate"], true)
    message = leak["warnings"][0]
    assert f"grows by {leak['rate'] / 1e6:.2f} MB per step" in message and "host RAM is full in about" in message
    found = leak["found"]
    assert found is not None and found["steps"] == [229, 230]
    assert abs(found["kept_per_step"] - true) / true < 0.05, (found["kept_per_step"], true)  # what the graphs hold
    top = found["by_op"][0]
    assert top["name"] == "aten::sub"
    assert abs(top["bytes_per_step"] - BATCH * OUT * 4) / (BATCH * OUT * 4) < 0.01
    line = "2.1 MB per step kept alive from aten::sub (steps 229-230 of this window onward): a tensor kept across steps"
    assert line in leak["text"] and line in leak["summary"] and "kept alive from aten::sub" in leak["html"]


def test_the_same_loop_keeping_detached_losses_is_silent(runs: dict[str, Any]) -> None:
    detached = runs["detached"]
    assert detached["readings"] >= 10  # it was measured, and said nothing
    assert detached["warnings"] == [] and detached["rate"] is None
    assert detached["found"] is None and "memory growth" not in detached["text"] + detached["summary"]

"""The peak by category from ``[memory]`` events and the process's parts: the split by phase, the gradients made
again inside the window, a device's memory from before the trace, the parts' metadata, and advice only under
pressure."""

from __future__ import annotations

from perf_callbacks.analysis.memory.parts import CONCERN, META_KEY, advice, categories, parts_of

PHASES = [(0.0, 100.0, "forward"), (100.0, 200.0, "backward"), (200.0, 300.0, "optimizer_step")]
PARTS = {"parameters": 1000, "gradients": 1000, "optimizer_state": 2000, "resident": 3000, "new_gradients": 1000}


def host(*events: tuple[float, int, int]) -> list[tuple[float, int, int, int, int, int]]:
    """``(ts, bytes, addr)`` as host events; ``Total Allocated`` is left meaningless (0), as the host's often is."""
    return [(ts, 1, nbytes, 0, 0, addr) for ts, nbytes, addr in events]


def test_a_peak_in_backward_splits_activations_gradients_and_temporaries() -> None:
    events = host((10, 500, 1), (20, 300, 2), (30, -300, 2),  # an activation kept, a forward temporary freed
                  (110, 1000, 3), (120, 200, 4),  # the gradients, a backward temporary: the peak
                  (130, -200, 4), (140, -500, 1), (210, 100, 5))
    cats, at = categories(events, ["mm", "relu", None, "mm_bw", "tmp", None, None, "adam"], PHASES, PARTS, "host")
    assert cats == {"parameters": 1000, "gradients": 1000, "optimizer_state": 2000, "activations": 500, "other": 200,
                    "peak": 4700}  # resident 3000 + the window's most: 500 + 1000 + 200
    assert at is not None and (at["phase"], at["op"], at["memory"]) == ("backward", "tmp", "host")


def test_a_peak_in_forward_holds_no_gradient_made_in_the_window() -> None:
    events = host((10, 5000, 1), (110, -5000, 1), (120, 1000, 2))  # zero_grad(set_to_none): gradients come later
    cats, at = categories(events, ["big", None, "mm_bw"], PHASES, PARTS, "host")
    assert cats is not None and at is not None
    assert (cats["gradients"], cats["activations"], cats["other"], cats["peak"]) == (0, 5000, 0, 8000)
    kept = categories(events, ["big", None, "mm_bw"], PHASES, {**PARTS, "new_gradients": 0, "resident": 4000},
                      "host")[0]
    assert kept is not None and (kept["gradients"], kept["peak"]) == (1000, 9000)  # kept through the window


def test_a_device_peak_is_the_allocators_count_and_what_the_parts_leave_unexplained() -> None:
    events = [(10.0, 1, 500, 3700, 1, 1), (20.0, 1, -200, 3500, 1, 99)]  # 99: allocated before the trace
    cats, at = categories(events, ["mm", None], PHASES, PARTS, "device")
    assert cats is not None and at is not None
    assert cats["peak"] == 3700 and at["before_trace"] == 3200 and at["not_resident"] == 200
    assert (cats["activations"], cats["other"]) == (500, 3700 - 1000 - 2000 - 0 - 500)


def test_nothing_without_events_parts_or_addresses() -> None:
    events = host((10, 500, 1))
    assert categories([], [], PHASES, PARTS, "host") == (None, None)
    assert categories(events, ["mm"], PHASES, {}, "host") == (None, None)
    assert categories([(10.0, 1, 500, 500, 0, None)], ["mm"], PHASES, PARTS, "host") == (None, None)


def test_parts_of_takes_only_byte_counts() -> None:
    good = {**PARTS, "device": "cuda", "capacity": 80 * 10**9}
    assert parts_of({META_KEY: good}) == {**PARTS, "capacity": 80 * 10**9}
    assert parts_of({META_KEY: {**good, "gradients": -1}}) == {}
    assert parts_of({META_KEY: {**good, "parameters": "1 GB"}}) == {}
    assert parts_of({META_KEY: {**good, "capacity": None}})["capacity"] is None
    assert parts_of({}) == {}


def test_advice_only_when_the_peak_nears_the_device_memory() -> None:
    cats = {"parameters": 10, "gradients": 10, "optimizer_state": 40, "activations": 25, "other": 5, "peak": 90}
    pressed = advice(cats, {"capacity": 100})
    assert pressed is not None and pressed.startswith("memory: the peak holds 90% of the device's memory and "
                                                      "optimizer state is its largest part")
    assert "ZeroRedundancyOptimizer" in pressed
    assert advice(cats, {"capacity": int(90 / CONCERN) + 1}) is None  # just under the bar
    assert advice(cats, {"capacity": None}) is None  # the host: no capacity, no advice
    activations = advice({**cats, "activations": 45, "optimizer_state": 20}, {"capacity": 100})
    assert activations is not None and "activation checkpointing" in activations and "bf16 autocast" in activations

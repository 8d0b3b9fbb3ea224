"""NvtxRanges checked through a real NVTX tool: the test injection library records every NVTX call."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from perf_callbacks.core.ranges.nvtx import PHASES
from tests.nvtx_injection.harness import Event, assert_balanced, build_injection_lib, pushes, run_with_injection


@pytest.fixture(scope="session")
def injection_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_injection_lib(tmp_path_factory)


def run(script: str, tmp_path: Path, lib: Path | None, inject: bool = True) -> list[Event]:
    header = "from perf_callbacks.core.ranges.nvtx import NvtxRanges\n"
    return run_with_injection(header + textwrap.dedent(script), tmp_path, lib, inject=inject)


STEP_SCRIPT = """
ranges = NvtxRanges({domain})
assert ranges.enabled
ranges.push_step(7)
for phase in ("data_wait", "forward", "backward", "optimizer_step"):
    ranges.push(phase)
    ranges.pop()
ranges.pop()
assert ranges.depth == 0
"""


def test_default_domain_step_and_phases(injection_lib: Path, tmp_path: Path) -> None:
    events = run(STEP_SCRIPT.format(domain=""), tmp_path, injection_lib)

    opened = pushes(events)
    assert [(e.domain, e.message, e.category, e.payload) for e in opened] == [
        ("perf_callbacks", "step", "step", 7),
        ("perf_callbacks", "data_wait", "data", None),
        ("perf_callbacks", "forward", "compute", None),
        ("perf_callbacks", "backward", "compute", None),
        ("perf_callbacks", "optimizer_step", "compute", None),
    ]
    paths = assert_balanced(events)
    assert paths[1:] == [("step", p) for p in ("data_wait", "forward", "backward", "optimizer_step")]


def test_custom_domain(injection_lib: Path, tmp_path: Path) -> None:
    events = run(STEP_SCRIPT.format(domain="'trainer_a'"), tmp_path, injection_lib)

    assert {e.domain for e in events if e.kind in ("push", "pop")} == {"trainer_a"}
    assert len(pushes(events, "trainer_a")) == 5
    assert_balanced(events)


def test_every_phase_has_its_category(injection_lib: Path, tmp_path: Path) -> None:
    script = f"""
    ranges = NvtxRanges()
    for phase in {list(PHASES)!r}:
        ranges.push(phase)
        ranges.pop()
    ranges.push("my_phase")
    ranges.pop()
    """
    events = run(script, tmp_path, injection_lib)

    got = {e.message: e.category for e in pushes(events)}
    assert got == {**{phase: category for phase, (_, category) in PHASES.items()}, "my_phase": "other"}
    assert_balanced(events)


@pytest.mark.parametrize("step", [0, 1, 2**40])
def test_step_number_is_the_payload(injection_lib: Path, tmp_path: Path, step: int) -> None:
    events = run(f"r = NvtxRanges(); r.push_step({step}); r.pop()", tmp_path, injection_lib)

    (push,) = pushes(events)
    assert (push.message, push.payload) == ("step", step)
    assert isinstance(push.payload, int)


def test_pop_all_balances_after_an_exception(injection_lib: Path, tmp_path: Path) -> None:
    script = """
    ranges = NvtxRanges()
    try:
        ranges.push_step(3)
        ranges.push("forward")
        ranges.push("backward")
        raise RuntimeError("CUDA out of memory")
    except RuntimeError:
        ranges.pop_all()
    assert ranges.depth == 0
    ranges.pop()  # nothing open: must not emit a pop
    """
    events = run(script, tmp_path, injection_lib)

    assert [e.kind for e in events if e.kind in ("push", "pop")] == ["push"] * 3 + ["pop"] * 3
    assert assert_balanced(events)[-1] == ("step", "forward", "backward")


def test_works_on_cpu_only_torch_where_torch_cuda_nvtx_raises(injection_lib: Path, tmp_path: Path) -> None:
    script = """
    import torch
    if torch.version.cuda is None:
        try:
            torch.cuda.nvtx.range_push("x")
        except RuntimeError:
            pass
        else:
            raise AssertionError("torch.cuda.nvtx.range_push no longer raises on a CPU-only build")
    ranges = NvtxRanges()
    ranges.push_step(1)
    ranges.push("forward")
    ranges.pop_all()
    """
    events = run(script, tmp_path, injection_lib)

    assert [e.message for e in pushes(events)] == ["step", "forward"]
    assert_balanced(events)


def test_without_a_tool_everything_is_a_silent_no_op(tmp_path: Path) -> None:
    script = """
    import nvtx
    assert not isinstance(nvtx.get_domain("perf_callbacks"), nvtx.Domain), "a tool is attached"
    ranges = NvtxRanges()
    assert not ranges.enabled  # no tool: the domain is a dummy, so every call returns at once
    ranges.push_step(1)
    for phase in ("data_wait", "forward", "my_phase"):
        ranges.push(phase)
    assert ranges.depth == 0
    ranges.pop()
    ranges.pop_all()
    ranges.pop()
    assert ranges.depth == 0
    print("ok")
    """
    assert run(script, tmp_path, None, inject=False) == []


def test_disabled_ranges_emit_nothing(injection_lib: Path, tmp_path: Path) -> None:
    script = """
    ranges = NvtxRanges(enabled=False)
    assert not ranges.enabled
    ranges.push_step(1); ranges.push("forward"); ranges.pop(); ranges.pop_all()
    assert ranges.depth == 0
    """
    assert pushes(run(script, tmp_path, injection_lib)) == []


def test_injection_library_sees_the_nvtx_package(injection_lib: Path, tmp_path: Path) -> None:
    """The harness itself: registered strings, categories, payloads and the default domain come back as sent."""
    script = """
    import nvtx
    d = nvtx.get_domain("harness")
    assert isinstance(d, nvtx.Domain)
    d.push_range(d.get_event_attributes(message="outer", category="cat_a", payload=-5))
    d.mark(d.get_event_attributes(message="tick", payload=2.5))
    d.pop_range()
    nvtx.push_range("plain")
    nvtx.pop_range()
    """
    events = run(script, tmp_path, injection_lib)

    outer = pushes(events, "harness")[0]
    assert (outer.message, outer.category, outer.payload) == ("outer", "cat_a", -5)
    assert [(e.message, e.payload) for e in events if e.kind == "mark"] == [("tick", 2.5)]
    assert [e.message for e in pushes(events)] == ["outer", "plain"]
    assert_balanced(events)


def test_every_colour_is_known_to_the_nvtx_package() -> None:
    from nvtx.colors import color_to_hex

    from perf_callbacks.core.ranges.nvtx import NvtxRanges

    for color in [c for c, _ in PHASES.values()] + [NvtxRanges(enabled=False)._step_color]:
        color_to_hex(color)


def test_an_nvtx_package_without_the_domain_api_disables_ranges_with_one_prefixed_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # nvtx 0.2.10 has no get_domain (0.2.11 no Domain.push_range); pyproject asks for 0.2.12, but an older one may
    # still be installed: the ranges turn off with one warning, attributed to the caller, and nothing raises.
    import types
    import warnings

    from perf_callbacks.core.ranges.nvtx import NvtxRanges

    monkeypatch.setitem(__import__("sys").modules, "nvtx", types.ModuleType("nvtx"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ranges = NvtxRanges("perf_callbacks")
        ranges.push_step(1)
        ranges.push("forward")
        ranges.pop()
        ranges.pop()
    assert [str(w.message) for w in seen] == [
        "perf-callbacks: NVTX ranges disabled: AttributeError: module 'nvtx' has no attribute 'get_domain'. "
        "Training continues without them."
    ]
    assert seen[0].filename == __file__ and not ranges.enabled and ranges.depth == 0

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import nvtx
import pytest
import torch

from perf_callbacks.core.ranges.module_ranges import CATEGORY, ModuleRanges
from perf_callbacks.core.ranges.nvtx import NvtxRanges
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from tests.nvtx_injection.harness import assert_balanced, build_injection_lib, pushes, run_with_injection

MODEL = """
import torch
from types import SimpleNamespace
from perf_callbacks.core.ranges.module_ranges import ModuleRanges

class Boom(torch.nn.Module):
    def forward(self, x):
        raise ValueError("boom")

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()))
x = torch.zeros(1, 2)
"""


@pytest.fixture(scope="session")
def injection_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_injection_lib(tmp_path_factory)


def nested_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()))


def no_hooks(model: torch.nn.Module) -> bool:
    return all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


@pytest.fixture
def domain(monkeypatch: pytest.MonkeyPatch) -> mock.MagicMock:
    """A recording stand-in for the nvtx domain a real tool would hand out."""
    fake = mock.MagicMock(spec=nvtx.Domain)
    fake.get_event_attributes.side_effect = lambda message, color, category: (message, category)
    monkeypatch.setattr(nvtx, "get_domain", lambda name: fake)
    return fake


def test_ranges_are_nested_named_and_balanced(injection_lib: Path, tmp_path: Path) -> None:
    script = MODEL + textwrap.dedent("""
    ranges = ModuleRanges(SimpleNamespace(enabled=True, domain_name="perf_callbacks"))
    assert ranges.install(model) == 5
    model(x)
    model(x)
    ranges.remove()
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())
    model(x)  # after remove(): nothing emitted
    """)
    events = run_with_injection(script, tmp_path, injection_lib)

    one_forward = [("Sequential",), ("Sequential", "0"), ("Sequential", "1"), ("Sequential", "1", "1.0")]
    one_forward += [("Sequential", "1", "1.1")]
    assert assert_balanced(events) == one_forward * 2
    assert {(e.domain, e.category) for e in pushes(events)} == {("perf_callbacks", CATEGORY)}


def test_balanced_when_forward_raises(injection_lib: Path, tmp_path: Path) -> None:
    script = MODEL + textwrap.dedent("""
    model.append(Boom())
    ranges = ModuleRanges(SimpleNamespace(enabled=True, domain_name="perf_callbacks"))
    ranges.install(model)
    for _ in range(2):
        try:
            model(x)
        except ValueError:
            pass
        assert ranges.depth == 0, ranges.depth
    ranges.remove()
    """)
    events = run_with_injection(script, tmp_path, injection_lib)

    assert [p[-1] for p in assert_balanced(events)][-2:] == ["1.1", "2"]
    assert len(pushes(events)) == 12


def test_nested_inside_the_step_and_forward_ranges(injection_lib: Path, tmp_path: Path) -> None:
    script = MODEL + textwrap.dedent("""
    from perf_callbacks.core.ranges.nvtx import NvtxRanges
    nvtx_ranges = NvtxRanges()
    ranges = ModuleRanges(nvtx_ranges)
    ranges.install(model)
    nvtx_ranges.push_step(4)
    nvtx_ranges.push("forward")
    model(x)
    nvtx_ranges.pop_all()
    ranges.remove()
    """)
    events = run_with_injection(script, tmp_path, injection_lib)

    assert ("step", "forward", "Sequential", "1", "1.0") in assert_balanced(events)


def test_without_a_tool_installs_nothing() -> None:
    model = nested_model()
    ranges = ModuleRanges(NvtxRanges())

    assert ranges.install(model) == 0
    assert no_hooks(model)
    assert not ranges.installed


def test_with_nvtx_off_installs_nothing(domain: mock.MagicMock) -> None:
    model = nested_model()

    assert ModuleRanges(NvtxRanges(enabled=False)).install(model) == 0
    assert no_hooks(model)


def test_remove_takes_every_hook_off_and_the_cost_with_it(domain: mock.MagicMock) -> None:
    model, other = nested_model(), nested_model()
    ranges = ModuleRanges(SimpleNamespace(enabled=True, domain_name="perf_callbacks"))

    assert ranges.install(model) == 5
    assert not no_hooks(model)
    assert no_hooks(other)  # hooks are per model, never global
    model(torch.zeros(1, 2))
    assert domain.push_range.call_count == domain.pop_range.call_count == 5

    ranges.remove()
    model(torch.zeros(1, 2))
    assert no_hooks(model)
    assert domain.push_range.call_count == domain.pop_range.call_count == 5
    assert not ranges.installed


def test_attributes_are_built_once_per_module_name(domain: mock.MagicMock) -> None:
    model = nested_model()
    ranges = ModuleRanges(SimpleNamespace(enabled=True, domain_name="perf_callbacks"))
    for _ in range(3):  # three windows
        ranges.install(model)
        model(torch.zeros(1, 2))
        ranges.remove()

    assert domain.get_event_attributes.call_count == 5
    assert domain.get_event_attributes.call_args.kwargs["category"] == CATEGORY
    pushed = [c.args[0][0] for c in domain.push_range.call_args_list]
    assert pushed == ["Sequential", "0", "1", "1.0", "1.1"] * 3


def test_install_twice_does_not_double_the_hooks(domain: mock.MagicMock) -> None:
    model = nested_model()
    ranges = ModuleRanges(SimpleNamespace(enabled=True, domain_name="perf_callbacks"))
    ranges.install(model)
    ranges.install(model)
    model(torch.zeros(1, 2))

    assert domain.push_range.call_count == 5
    ranges.remove()


def test_a_failing_push_disables_with_one_warning(domain: mock.MagicMock) -> None:
    domain.push_range.side_effect = RuntimeError("nvtx broke")
    model = nested_model()
    ranges = ModuleRanges(SimpleNamespace(enabled=True, domain_name="perf_callbacks"))
    ranges.install(model)

    with pytest.warns(InstrumentUnavailableWarning, match="^perf-callbacks: per-module NVTX ranges disabled.*nvtx broke") as seen:
        model(torch.zeros(1, 2))
    model(torch.zeros(1, 2))
    assert len(seen) == 1 and seen[0].filename == __file__  # attributed to the line that ran the model

    assert no_hooks(model)
    assert ranges.install(model) == 0
    assert domain.pop_range.call_count == 0

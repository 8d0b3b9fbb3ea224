from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from perf_callbacks.core.flops.count import StepCounter
from perf_callbacks.core.flops.modules import ModuleOwners
from perf_callbacks.core.module_spans import SPAN_PREFIX, modules_meta, param_counts, path_of
from perf_callbacks.core.ranges import module_ranges
from perf_callbacks.core.ranges.module_ranges import ModuleRanges
from perf_callbacks.core.ranges.nvtx import NvtxRanges
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from tests.block_models import TwoBlocks, block_flops, global_hooks, hooks_on


def all_hooks(model: torch.nn.Module) -> int:
    return hooks_on(model)


def spans_of(prof: torch.profiler.profile, tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]


def module_span_names(events: list[dict[str, Any]]) -> list[str]:
    return [e["name"][len(SPAN_PREFIX):] for e in sorted(events, key=lambda e: e["ts"])
            if e["name"].startswith(SPAN_PREFIX)]


def test_one_span_per_module_forward_named_by_path_and_nested(tmp_path: Path) -> None:
    model = TwoBlocks()
    ranges = ModuleRanges(NvtxRanges(), spans=True)  # no NVTX tool attached: trace spans alone
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        assert ranges.install(model) == 9  # the ModuleList too (its hooks never run: it has no forward)
        model(torch.zeros(2, 8)).sum().backward()
        ranges.remove()
    events = spans_of(prof, tmp_path)

    assert module_span_names(events) == ["", "stem", "blocks.0", "blocks.0.fc1", "blocks.0.fc2", "blocks.1",
                                         "blocks.1.fc1", "blocks.1.fc2"]
    by_name = {e["name"]: e for e in events}
    outer, inner = by_name[SPAN_PREFIX + "blocks.1"], by_name[SPAN_PREFIX + "blocks.1.fc2"]
    assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    assert all_hooks(model) == 0


def test_hooks_only_between_install_and_remove_and_never_global() -> None:
    model, before = TwoBlocks(), global_hooks()
    ranges = ModuleRanges(NvtxRanges(), spans=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        ranges.install(model)
        assert all_hooks(model) == 18 and global_hooks() == before
        ranges.remove()
    assert all_hooks(model) == 0 and global_hooks() == before
    assert not ranges.installed


def test_spans_work_inside_a_users_profiler_and_record_function(tmp_path: Path) -> None:
    model = TwoBlocks()
    ranges = ModuleRanges(NvtxRanges(), spans=True)
    ranges.install(model)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, \
            torch.profiler.record_function("users_own_range"):
        model(torch.zeros(2, 8))
    model(torch.zeros(2, 8))  # no profiler runs now: the hooks open nothing and never raise
    ranges.remove()
    events = spans_of(prof, tmp_path)

    user = next(e for e in events if e["name"] == "users_own_range")
    spans = [e for e in events if e["name"].startswith(SPAN_PREFIX)]
    assert len(spans) == 8
    assert all(user["ts"] <= s["ts"] and s["ts"] + s["dur"] <= user["ts"] + user["dur"] for s in spans)


def test_a_profiler_stopped_inside_a_forward_does_not_raise() -> None:
    class Stops(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            prof.stop()  # another tool ends the profiler while our spans are open
            return x

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Stops())
    ranges = ModuleRanges(NvtxRanges(), spans=True)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    prof.start()
    ranges.install(model)
    model(torch.zeros(1, 2))
    model(torch.zeros(1, 2))
    ranges.remove()

    assert all_hooks(model) == 0 and not ranges._open


def test_a_failing_span_disables_spans_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> None:
        raise RuntimeError("span broke")

    monkeypatch.setattr(module_ranges, "enter_span", broken)
    model = TwoBlocks()
    ranges = ModuleRanges(NvtxRanges(), spans=True)
    ranges.install(model)
    with pytest.warns(InstrumentUnavailableWarning, match="per-module NVTX ranges and spans disabled.*span broke"):
        out = model(torch.zeros(1, 8))
    assert out.shape == (1, 8)  # the forward ran to the end
    assert all_hooks(model) == 0
    assert ranges.install(model) == 0


def test_a_compiled_model_gets_no_trace_spans_and_says_why() -> None:
    model = torch.compile(TwoBlocks())  # lazy: nothing compiles until it runs
    ranges = ModuleRanges(NvtxRanges(), spans=True)

    assert ranges.install(model) == 0
    assert not ranges.tracing and "compiled" in ranges.note
    assert all_hooks(model) == 0


def test_paths_leave_wrapper_segments_out() -> None:
    assert path_of("blocks.0._fsdp_wrapped_module.fc1") == "blocks.0.fc1"
    assert path_of("_orig_mod.blocks.0._checkpoint_wrapped_module") == "blocks.0"
    assert path_of("module.blocks.1", data_parallel_root=True) == "blocks.1"
    assert path_of("module.blocks.1") == "module.blocks.1"


def test_parameters_per_module_count_a_shared_weight_once() -> None:
    model = TwoBlocks()
    model.blocks[1].fc1.weight = model.blocks[0].fc1.weight  # tied

    counts = param_counts(model)
    assert counts["blocks.0.fc1"] == 8 * 32 + 32 and counts["blocks.1.fc1"] == 32  # its bias only
    assert sum(counts.values()) == sum(p.numel() for p in model.parameters())
    assert modules_meta(model, True, "", {"stem": 3}, "")["root"] == "TwoBlocks"


def test_flops_by_module_are_flop_counter_modes_module_tree() -> None:
    model, x = TwoBlocks(), torch.randn(4, 8)
    owners = ModuleOwners(model)
    owners.install()
    counter = StepCounter(owner=owners.owner)
    counter.start()
    model(x).sum().backward()
    assert counter.stop()
    owners.remove()
    with FlopCounterMode(display=False, depth=None) as mode:
        model(x).sum().backward()

    assert all_hooks(model) == 0
    own = {k: v for k, v in counter.by_module.items() if k is not None}
    theirs = {k: sum(v.values()) for k, v in mode.get_flop_counts().items()}
    for key, flops in theirs.items():
        if key.startswith("TwoBlocks."):
            path = key[len("TwoBlocks."):]
            assert sum(v for p, v in own.items() if p == path or p.startswith(path + ".")) == flops, key
    assert sum(own.values()) == counter.total == theirs["Global"]
    assert own["blocks.0.fc1"] == own["blocks.1.fc1"] == 3 * 2 * 4 * 8 * 32  # forward, grad input, grad weight
    assert sum(v for p, v in own.items() if p.startswith("blocks.1")) == block_flops(4, 8)


@pytest.mark.parametrize("accumulate", [1, 3])
def test_the_counting_step_gives_flops_by_module_and_leaves_no_hook(tmp_path: Path, accumulate: int) -> None:
    from tests.core.flops_helpers import make_engine, train

    engine = make_engine(tmp_path, module_spans=True)
    model, x = TwoBlocks(8), torch.randn(4, 8)
    train(engine, model, x, steps=3, accumulate=accumulate)
    engine.close()
    by_module, note = engine.flops.module_flops()

    assert by_module is not None and note == ""
    assert sum(by_module.values()) == engine.flops.per_step  # every counted op ran inside the model's forward
    assert sum(v for p, v in by_module.items() if p.startswith("blocks.0")) == block_flops(4, 8) * accumulate
    assert hooks_on(model) == 0


def test_attention_flops_go_to_each_layer_equally(tmp_path: Path) -> None:
    from tests.core.flops_helpers import make_engine, train

    engine = make_engine(tmp_path, module_spans=True)
    model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0), 2,
                                        enable_nested_tensor=False)
    train(engine, model, torch.randn(2, 5, 16, requires_grad=True), steps=2)  # both layers compute input grads
    by_module, _ = engine.flops.module_flops()

    assert by_module is not None and sum(by_module.values()) == engine.flops.per_step
    layer = [sum(v for p, v in by_module.items() if p.startswith(f"layers.{i}.")) for i in (0, 1)]
    assert layer[0] == layer[1] > 0 and by_module.get("layers.0.self_attn", 0) > 0


def test_without_autograd_sequence_numbers_the_total_is_still_counted(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from perf_callbacks.core.flops import modules as module_flops
    from tests.core.flops_helpers import make_engine, train

    monkeypatch.setattr(module_flops, "_SEQ", None)
    engine = make_engine(tmp_path, module_spans=True)
    model = TwoBlocks(8)
    train(engine, model, torch.randn(4, 8), steps=2)

    assert engine.flops.per_step and engine.flops.module_flops() == (None, "not counted per module")
    assert hooks_on(model) == 0


def test_ops_counted_through_their_decomposition_are_owned_by_their_module(tmp_path: Path) -> None:
    from tests.core.flops_helpers import Distilled, make_engine, train

    engine = make_engine(tmp_path, module_spans=True)
    train(engine, Distilled(), torch.randn(8, 32), steps=2)  # the teacher's linear reaches the mode whole
    by_module, _ = engine.flops.module_flops()

    assert by_module is not None and sum(by_module.values()) == engine.flops.per_step
    assert by_module["teacher.0"] == 2 * 8 * 32 * 64 and by_module["teacher.2"] == 2 * 8 * 64 * 16

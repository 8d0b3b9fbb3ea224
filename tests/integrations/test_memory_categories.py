"""The peak by category with real frameworks: a small MLP trained with Adam under Lightning and Accelerate.

Parameters, gradients and optimizer state must equal what the test computes from the tensors, and the categories
must add up to the peak measured from the profiler's allocations: on the host, what lived through the window plus
the most the window's own allocations held at once (computed here from the raw ``[memory]`` events); on CUDA, the
allocator's largest ``Total Allocated``, whose part from before the trace is parameters and optimizer state within
the allocator's rounding (512 bytes a block).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn

from perf_callbacks import AcceleratePerfHook, GPUPerfCallback
from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.memory.parts import KEYS
from tests.integrations.lit_helpers import loader, trainer
from tests.integrations.memory_helpers import OPTIONS, most_held, sizes, trace_of

ROUNDING = 512  # the CUDA caching allocator rounds each block up to a multiple of 512 bytes


def mlp(inputs: int, outputs: int) -> nn.Module:
    return nn.Sequential(nn.Linear(inputs, 64), nn.ReLU(), nn.Linear(64, outputs))


class AdamModel(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = mlp(16, 4)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def lightning_run(tmp_path: Path, accelerator: str, batch_size: int = 32) -> tuple[Any, tuple[int, int, int]]:
    model = AdamModel()
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), **OPTIONS)
    t = trainer(tmp_path, [cb], max_steps=4, accelerator=accelerator)
    t.fit(model, loader(4 * batch_size, batch_size=batch_size))
    return analyze(str(tmp_path / "perf")), sizes(list(model.parameters()), t.optimizers[0], accelerator)


def accelerate_run(tmp_path: Path, cpu: bool) -> tuple[Any, tuple[int, int, int]]:
    from accelerate import Accelerator

    from tests.integrations.acc_helpers import data

    acc = Accelerator(cpu=cpu)
    model = mlp(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.Adam(model.parameters()), data(64, batch_size=16,
                                                                                   num_workers=0))
    hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf"), **OPTIONS).register(acc)
    with hook:
        for x, y in hook.iter(dl):
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()  # after the step: no gradient is left at the window's end
            if hook.optimizer_steps == 4:
                break
    return analyze(str(tmp_path / "perf")), sizes(list(model.parameters()), opt.optimizer, acc.device.type)


def check_host(tmp_path: Path, result: Any, expected: tuple[int, int, int]) -> None:
    cats, at = result.memory.categories, result.memory.at_peak
    assert tuple(cats) == KEYS
    assert (cats["parameters"], cats["gradients"], cats["optimizer_state"]) == expected
    assert sum(cats[k] for k in KEYS[:-1]) == cats["peak"]
    held, _ = most_held(trace_of(tmp_path / "perf"), device_type=0)
    parameters, _, optimizer_state = expected
    assert cats["peak"] == parameters + optimizer_state + held  # what lived through the window + the window's most
    assert at["phase"] in ("forward", "backward", "optimizer_step") and at["memory"] == "host"
    assert not any(r.startswith("memory:") for r in result.recommendations)  # a healthy run: no memory advice
    report = json.loads(json.dumps(result.to_dict()))
    assert report["memory_categories"] == cats


def test_lightning_adam_peak_by_category(tmp_path: Path) -> None:
    result, expected = lightning_run(tmp_path, "cpu")
    check_host(tmp_path, result, expected)
    summary = next((tmp_path / "perf").rglob("summary.txt")).read_text()
    assert "the peak by category (" in summary and "optimizer state " in summary  # the window summary shows it
    from perf_callbacks.analysis import render_html

    assert "<th>the peak by category</th>" in render_html(result) and "<td>optimizer state</td>" in render_html(result)


def test_diff_names_the_category_that_changed(tmp_path: Path) -> None:
    from perf_callbacks.analysis.diff.compare import compare
    from perf_callbacks.analysis.diff.text import format_diff

    base, _ = lightning_run(tmp_path / "base", "cpu", batch_size=32)
    new, _ = lightning_run(tmp_path / "new", "cpu", batch_size=256)  # 8 times the activations, the same model
    d = compare(base, new)
    cats = d.memory_categories
    assert cats["activations"]["new"] > 4 * cats["activations"]["base"] > 0
    assert "activations" in cats["changed"] and "peak" in cats["changed"]
    assert not {"parameters", "gradients", "optimizer_state"} & set(cats["changed"])  # the model did not change
    text = format_diff(d)
    (changed,) = [x for x in text.splitlines() if x.startswith("memory changed: ")]  # under the summary line
    assert "activations +" in changed and "parameters" not in changed and "optimizer state" not in changed
    (line,) = [x for x in text.splitlines() if x.startswith("  activations ")]
    assert line.endswith("(changed)")


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_adam_peak_by_category(tmp_path: Path) -> None:
    result, expected = accelerate_run(tmp_path, cpu=True)
    check_host(tmp_path, result, expected)
    assert result.memory.categories["gradients"] > 0  # read at the optimizer step: zero_grad freed them by the end


def check_cuda(tmp_path: Path, result: Any, expected: tuple[int, int, int], blocks: int) -> None:
    cats, at = result.memory.categories, result.memory.at_peak
    assert (cats["parameters"], cats["gradients"], cats["optimizer_state"]) == expected
    _, total = most_held(trace_of(tmp_path / "perf"), device_type=1)
    assert cats["peak"] == total  # the allocator's own count
    parameters, _, optimizer_state = expected
    assert 0 <= at["before_trace"] - (parameters + optimizer_state) <= blocks * ROUNDING + 64 * 16 * 4  # + a batch
    assert at["capacity"] == torch.cuda.get_device_properties(0).total_memory
    assert not any(r.startswith("memory:") for r in result.recommendations)  # kilobytes of a whole GPU: no advice


@pytest.mark.gpu
def test_lightning_adam_peak_by_category_cuda(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    result, expected = lightning_run(tmp_path, "cuda")
    check_cuda(tmp_path, result, expected, blocks=3 * 4)  # 4 parameters, 2 Adam moments each


@pytest.mark.gpu
@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_adam_peak_by_category_cuda(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    result, expected = accelerate_run(tmp_path, cpu=False)
    check_cuda(tmp_path, result, expected, blocks=3 * 4)


def test_transformers_trainer_parts_are_its_model_and_adamw(tmp_path: Path) -> None:
    from perf_callbacks import TransformersPerfCallback
    from tests.integrations.hf_helpers import QUIET, make_trainer

    cb = TransformersPerfCallback(output_dir=str(tmp_path / "perf"), **{**QUIET, **OPTIONS})
    t = make_trainer(tmp_path / "hf", [cb], max_steps=4)
    t.train()
    cats = analyze(str(tmp_path / "perf")).memory.categories
    assert cats is not None
    assert (cats["parameters"], cats["gradients"], cats["optimizer_state"]) == sizes(
        list(t.model.parameters()), t.optimizer, "cpu")  # AdamW: two moments and a step per parameter

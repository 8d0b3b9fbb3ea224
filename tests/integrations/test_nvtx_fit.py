"""A short Lightning fit under a real NVTX tool (the injection library): names, domain, balance and step numbers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.nvtx_injection.harness import assert_balanced, build_injection_lib, pushes, run_with_injection


@pytest.fixture(scope="module")
def injection_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_injection_lib(tmp_path_factory)


LIGHTNING_FIT = textwrap.dedent("""
    from perf_callbacks import GPUPerfCallback
    from tests.integrations.lit_helpers import TinyModel, loader, trainer
    import pathlib, tempfile
    tmp = pathlib.Path(tempfile.mkdtemp())
    cb = GPUPerfCallback(output_dir=str(tmp), check_dataloaders=False, nvtx_modules=True,
                         schedule={"skip_first": 1, "wait": 0, "warmup": 0, "active": 2})
    trainer(tmp, [cb], max_steps=4, accumulate_grad_batches=2, val_check_interval=4).fit(
        TinyModel(), loader(), loader(n=16))
""")


def test_lightning_fit_emits_balanced_step_and_phase_ranges(injection_lib: Path, tmp_path: Path) -> None:
    events = run_with_injection(LIGHTNING_FIT, tmp_path, injection_lib)
    ours = [e for e in events if e.domain == "perf_callbacks"]
    paths = assert_balanced(ours)
    steps = [e.payload for e in pushes(ours) if e.message == "step"]
    assert steps == [0, 1, 2, 3]  # 4 steps ran; no range is opened for a step that never runs
    assert all(e.category == "step" for e in pushes(ours) if e.message == "step")
    in_step_1 = [p[1] for p in paths if len(p) == 2 and p[0] == "step"]
    assert in_step_1.count("forward") == 8 and in_step_1.count("backward") == 8  # 4 steps x 2 micro-batches
    assert in_step_1.count("optimizer_step") == 4
    assert "data_wait" in in_step_1 and "validation" in in_step_1
    # per-module ranges exist only inside the window (steps 1-2), nested in forward (Lightning calls training_step, so
    # the LightningModule itself has no forward call; its submodule "layer" does)
    module_paths = [p for p in paths if len(p) >= 3 and p[1] == "forward"]
    assert [p[2] for p in module_paths] == ["layer"] * 4  # one forward per micro-batch of steps 1 and 2 only
    order = [e.payload if e.message == "step" else e.message for e in pushes(ours) if e.message in ("step", "layer")]
    # step 1: 2 forwards, then validation after its optimizer step (2 batches, in step 1's tail); step 2: 2 forwards
    assert order[order.index(1) + 1 : order.index(3)].count("layer") == 6
    assert [p for p in paths if p[-1] == "layer" and p[1] == "validation"] == [("step", "validation", "layer")] * 2


ACCELERATE_LOOP = textwrap.dedent("""
    import pathlib, tempfile, torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from accelerate import Accelerator
    from perf_callbacks import AcceleratePerfHook
    tmp = pathlib.Path(tempfile.mkdtemp())
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    loader = DataLoader(data, batch_size=8, num_workers=1)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    hook = AcceleratePerfHook(output_dir=str(tmp), check_dataloaders=False,
                              schedule={"skip_first": 1, "wait": 0, "warmup": 0, "active": 1})
    with hook.register(accelerator):
        for x, y in hook.iter(loader):
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
            if hook.optimizer_steps == 2 and accelerator.sync_gradients:
                accelerator.save_state(str(tmp / "ckpt"))
""")


def test_accelerate_loop_emits_the_same_ranges(injection_lib: Path, tmp_path: Path) -> None:
    events = run_with_injection(ACCELERATE_LOOP, tmp_path, injection_lib)
    ours = [e for e in events if e.domain == "perf_callbacks"]
    paths = assert_balanced(ours)
    steps = [e.payload for e in pushes(ours) if e.message == "step"]
    assert steps[:4] == [0, 1, 2, 3]  # 8 micro-batches, 2 per optimizer step
    in_step = [p[1] for p in paths if len(p) == 2 and p[0] == "step"]
    assert in_step.count("forward") == 8 and in_step.count("backward") == 8
    assert in_step.count("optimizer_step") == 4
    assert "data_wait" in in_step
    # save_state after opt.step(): the optimizer_step phase has ended, the micro-batch has not
    assert [p for p in paths if p[-1] == "checkpoint"] == [("step", "checkpoint")]


# ---- balance after an exception, Ctrl-C or preemption mid-window ------------------------------------------------------
LIGHTNING_FAILING_FIT = textwrap.dedent("""
    import pathlib, tempfile
    import pytest
    from perf_callbacks import GPUPerfCallback
    from tests.integrations.lit_helpers import TinyModel, loader, trainer
    tmp = pathlib.Path(tempfile.mkdtemp())
    cb = GPUPerfCallback(output_dir=str(tmp), check_dataloaders=False, nvtx_modules=True, degradation_threshold=1e6,
                         schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 4})
    with pytest.raises(ValueError, match="user error at step 4"):  # raised inside forward, mid-window
        trainer(tmp, [cb], max_steps=20, accumulate_grad_batches=2).fit(TinyModel(fail_at_step=4), loader())
    assert cb.engine.exported
""")

ACCELERATE_FAILING_LOOP = textwrap.dedent("""
    import pathlib, tempfile, torch
    from torch import nn
    from accelerate import Accelerator
    from perf_callbacks import AcceleratePerfHook
    from tests.integrations.acc_helpers import data
    tmp = pathlib.Path(tempfile.mkdtemp())
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data())
    hook = AcceleratePerfHook(output_dir=str(tmp), check_dataloaders=False, nvtx_modules=True,
                              schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 4})
    try:
        with hook.register(acc):
            for x, y in hook.iter(dl):
                with acc.accumulate(model):
                    with hook.phase("loss"):
                        loss = nn.functional.mse_loss(model(x), y)
                        if hook.optimizer_steps == 4:
                            raise ERROR  # inside a nested phase range, mid-window
                    acc.backward(loss)
                    opt.step()
                    opt.zero_grad()
    except ERROR:
        pass
    assert hook.engine.exported
""")


@pytest.mark.parametrize(
    ("script", "steps"),
    [
        (LIGHTNING_FAILING_FIT, [0, 1, 2, 3, 4]),
        (ACCELERATE_FAILING_LOOP.replace("ERROR", "ValueError"), [0, 1, 2, 3, 4]),
        (ACCELERATE_FAILING_LOOP.replace("ERROR", "KeyboardInterrupt"), [0, 1, 2, 3, 4]),
    ],
    ids=["lightning-exception", "accelerate-exception", "accelerate-ctrl-c"],
)
def test_ranges_are_balanced_after_an_exception_mid_window(
    injection_lib: Path, tmp_path: Path, script: str, steps: list[int]
) -> None:
    events = run_with_injection(script, tmp_path, injection_lib)
    ours = [e for e in events if e.domain == "perf_callbacks"]
    assert [e.payload for e in pushes(ours) if e.message == "step"] == steps
    paths = assert_balanced(ours)
    assert ("step", "forward") in paths  # the tool saw the ranges that the exception cut short

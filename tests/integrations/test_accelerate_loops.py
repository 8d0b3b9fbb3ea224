"""AcceleratePerfHook in loops shaped unlike the README's: no hook.iter, load_state before register, a second hook,
no close(), an optimizer without torch step hooks. Cases that could crash the process run in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from torch import nn

from perf_callbacks import AcceleratePerfHook, InstrumentUnavailableWarning
from tests.integrations.acc_helpers import (
    ROOT,
    PlainOptimizer,
    data,
    plain_loop,
    profiler_steps,
    setup,
    spans,
    windows,
)

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # conftest.py
SCHEDULE = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 2, "repeat": 2}


def test_steps_are_counted_without_hook_iter(tmp_path: Path) -> None:
    acc, hook, parts = setup(tmp_path, ga=2, n=128, schedule=SCHEDULE, summary=True)
    with hook:
        plain_loop(acc, parts)  # 32 micro-batches, 16 optimizer steps
    assert hook.optimizer_steps == 16
    assert list(windows(tmp_path / "perf")) == ["window-000003-000004", "window-000006-000007"]
    assert [profiler_steps(p) for p in hook.engine.exported] == [{3, 4}, {6, 7}]
    summary = next((tmp_path / "perf").rglob("summary.txt")).read_text()
    assert "data wait: not measured in the loop" in summary  # said once, in the summary, instead of a wrong number


def test_register_before_prepare_still_counts_a_plain_loop(tmp_path: Path) -> None:
    """The README says register after prepare(); done the other way round, the optimizers are hooked at backward."""
    acc = Accelerator(cpu=True)
    hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf"), schedule=SCHEDULE, degradation_threshold=1e6)
    hook.register(acc)
    model = nn.Linear(8, 1)
    parts = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(64))
    with hook:
        plain_loop(acc, parts)  # 16 optimizer steps
    assert hook.optimizer_steps == 16
    assert [profiler_steps(p) for p in hook.engine.exported] == [{3, 4}, {6, 7}]


@pytest.mark.parametrize("hooks", [True, False], ids=["torch-optimizers", "optimizers-without-step-hooks"])
def test_several_optimizers_without_hook_iter_count_one_step_per_iteration(tmp_path: Path, hooks: bool) -> None:
    """The first optimizer to step marks the steps; without torch step hooks it is told apart from the others by id."""
    acc = Accelerator(cpu=True)
    g, d = nn.Linear(8, 8), nn.Linear(8, 1)
    g, d, dl = acc.prepare(g, d, data(64))
    make = torch.optim.SGD if hooks else PlainOptimizer
    opt_g, opt_d = (acc.prepare_optimizer(make(m.parameters(), lr=0.01)) for m in (g, d))
    with AcceleratePerfHook(output_dir=str(tmp_path / "perf"), schedule=SCHEDULE).register(acc) as hook:
        for x, _ in dl:  # GAN style: two optimizers step per iteration
            acc.backward(d(g(x).detach()).mean())
            opt_d.step()
            opt_d.zero_grad()
            acc.backward(-d(g(x)).mean())
            opt_g.step()
            opt_g.zero_grad()
    assert hook.optimizer_steps == 16
    assert [profiler_steps(p) for p in hook.engine.exported] == [{3, 4}, {6, 7}]


def test_load_state_before_register_continues_the_numbering(tmp_path: Path) -> None:
    schedule = {"skip_first": 6, "wait": 0, "warmup": 1, "active": 2}
    acc, hook, parts = setup(tmp_path, schedule=schedule)
    with hook:
        for _ in zip(range(4), hook.iter(parts[2]), strict=False):
            acc.backward(nn.functional.mse_loss(parts[0](_[1][0]), _[1][1]))
            parts[1].step()
            parts[1].zero_grad()
        acc.save_state(str(tmp_path / "ckpt"))
    assert hook.optimizer_steps == 4

    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)
    acc = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data())
    acc.load_state(str(tmp_path / "ckpt"))  # prepare, load, *then* register: a natural order
    hook = AcceleratePerfHook(output_dir=str(tmp_path / "resumed"), schedule=schedule).register(acc)
    assert hook.optimizer_steps == 4
    assert all("perf_callbacks_optimizer_steps" not in g for g in opt.optimizer.param_groups)  # the live groups are clean
    with hook:
        for x, y in hook.iter(dl):
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
            if hook.optimizer_steps == 10:
                break
    assert [profiler_steps(p) for p in hook.engine.exported] == [{7, 8}]


def test_an_optimizer_without_step_hooks_is_counted_through_the_accelerator(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Linear(8, 1)
    model, dl = acc.prepare(model, data(64))
    opt = acc.prepare_optimizer(PlainOptimizer(model.parameters()))  # prepare() takes torch optimizers only
    with AcceleratePerfHook(output_dir=str(tmp_path / "perf"), schedule=SCHEDULE).register(acc) as hook:
        for x, y in hook.iter(dl):
            with acc.accumulate(model):
                acc.backward(nn.functional.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
    assert hook.optimizer_steps == 8
    assert [profiler_steps(p) for p in hook.engine.exported] == [{3, 4}, {6, 7}]
    assert "step" not in vars(opt)  # the wrapper is removed at close


def test_a_second_hook_on_one_accelerator_stands_aside(tmp_path: Path) -> None:
    acc, first, parts = setup(tmp_path, schedule=SCHEDULE)
    with pytest.warns(InstrumentUnavailableWarning, match="a second AcceleratePerfHook .* stands aside") as seen:
        second = AcceleratePerfHook(output_dir=str(tmp_path / "second"), schedule=SCHEDULE).register(acc)
    assert len(seen) == 1
    model, opt, dl = parts
    with first, second:
        for x, y in first.iter(second.iter(dl)):
            with second.phase("loss"):
                loss = nn.functional.mse_loss(model(x), y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
    assert first.optimizer_steps == 16 and second.engine is None
    assert [profiler_steps(p) for p in first.engine.exported] == [{3, 4}, {6, 7}]
    assert not (tmp_path / "second").exists()


NO_CLOSE_SCRIPT = """
import sys, torch
from torch import nn
from accelerate import Accelerator
from perf_callbacks import AcceleratePerfHook
from tests.integrations.acc_helpers import data

acc = Accelerator(cpu=True)
model = nn.Linear(8, 1)
model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data())
hook = AcceleratePerfHook(output_dir=sys.argv[1], schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 20},
                          check_dataloaders=False).register(acc)
for x, y in hook.iter(dl):  # training ends inside the window, and nobody calls hook.close()
    acc.backward(nn.functional.mse_loss(model(x), y))
    opt.step()
    opt.zero_grad()
print("training done")
"""

TWO_HOOKS_SCRIPT = """
import sys, torch, warnings
from torch import nn
from accelerate import Accelerator
from perf_callbacks import AcceleratePerfHook
from tests.integrations.acc_helpers import data

acc = Accelerator(cpu=True)
model = nn.Linear(8, 1)
model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data())
schedule = {"skip_first": 0, "wait": 0, "warmup": 0, "active": 3}
with AcceleratePerfHook(output_dir=sys.argv[1], schedule=schedule).register(acc) as a, \\
        AcceleratePerfHook(output_dir=sys.argv[1] + "-b", schedule=schedule).register(acc) as b:
    for x, y in b.iter(a.iter(dl)):
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
print("training done")
"""


@pytest.mark.parametrize("script", [NO_CLOSE_SCRIPT, TWO_HOOKS_SCRIPT], ids=["no_close", "two_hooks"])
def test_process_exits_0_with_the_trace_written(tmp_path: Path, script: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "perf")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "training done" in proc.stdout
    (trace,) = (tmp_path / "perf").rglob("rank0.pt.trace.json.gz")
    assert profiler_steps(trace)
    assert not list(tmp_path.rglob("*.partial"))


# ---- the optimizers' hooks: each hooked once, all removed at close, a closure reaches the optimizer ---------------
def hook_count(opt: Any) -> tuple[int, int]:
    inner = opt.optimizer  # the torch optimizer inside the AcceleratedOptimizer
    return len(inner._optimizer_step_pre_hooks), len(inner._optimizer_step_post_hooks)


def test_each_optimizer_is_hooked_once_whenever_it_was_prepared_and_unhooked_at_close(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True)
    model, dl = acc.prepare(nn.Linear(8, 1), data(32))
    first = acc.prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.01))
    hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf"), schedule=SCHEDULE).register(acc)
    second = acc.prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.01))  # after register()
    for _ in range(2):  # each hook.iter() looks for new optimizers
        for x, y in hook.iter(dl):
            acc.backward(nn.functional.mse_loss(model(x), y))
            second.step()  # only the later one steps
            second.zero_grad()
    assert hook.optimizer_steps == 16
    assert hook_count(first) == hook_count(second) == (1, 1)
    hook.close()
    assert hook_count(first) == hook_count(second) == (0, 0)


@pytest.mark.parametrize("positional", [True, False])
def test_a_closure_reaches_the_optimizer(tmp_path: Path, positional: bool) -> None:
    acc = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.LBFGS(model.parameters(), max_iter=2), data(32))
    calls = []
    with AcceleratePerfHook(output_dir=str(tmp_path / "perf"), schedule=SCHEDULE).register(acc) as hook:
        for x, y in hook.iter(dl):
            def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
                calls.append(1)
                opt.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                acc.backward(loss)
                return loss

            opt.step(closure) if positional else opt.step(closure=closure)
    assert hook.optimizer_steps == 8 and len(calls) >= 8


def test_close_leaves_a_step_wrapper_installed_after_ours(tmp_path: Path) -> None:
    acc, hook, (model, opt, dl) = setup(tmp_path)
    theirs = opt.step  # another tool wraps the optimizer's step after register()
    opt.step = lambda *a, **k: theirs(*a, **k)
    wrapper = opt.step
    hook.close()
    assert opt.step is wrapper


def test_the_optimizer_step_span_ends_at_the_optimizer_step(tmp_path: Path) -> None:
    acc, hook, (model, opt, dl) = setup(tmp_path)
    with hook:
        for x, y in hook.iter(dl):
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            with torch.profiler.record_function("user.after_step"):  # not the optimizer's time
                opt.zero_grad()
    for path in hook.engine.exported:
        steps, after = spans(path, "perf_callbacks.optimizer_step"), spans(path, "user.after_step")
        assert len(steps) == len(after) == 2
        for step, user in zip(steps, after, strict=True):
            assert step["ts"] + step["dur"] <= user["ts"]


def test_a_plain_loop_marks_no_forward_or_data_wait_it_cannot_see(tmp_path: Path) -> None:
    """Without hook.iter() a step begins at the previous optimizer step: its data loading and forward are unmarked."""
    acc, hook, parts = setup(tmp_path)
    with hook:
        plain_loop(acc, parts)
    for path in hook.engine.exported:
        names = {e["name"] for e in spans(path, "perf_callbacks.")}
        assert {"perf_callbacks.backward", "perf_callbacks.optimizer_step"} <= names
        assert not names & {"perf_callbacks.forward", "perf_callbacks.data_wait"}, names

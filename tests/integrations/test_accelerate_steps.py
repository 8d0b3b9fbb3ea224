"""The step counting's marks in the trace (``integrations/_accelerate/steps.py``): where a plain loop's first step
begins, the ``optimizer_step`` span of an optimizer without torch step hooks, and the metrics flush set aside as our
own time. Each test kills mutants that the counting tests of ``test_accelerate_loops.py`` let live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from torch import nn

from perf_callbacks import AcceleratePerfHook
from tests.integrations.acc_helpers import PlainOptimizer, data, plain_loop, profiler_steps, spans

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # conftest.py
SCHEDULE = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}


def hook_on(acc: Accelerator, tmp_path: Path, **options: Any) -> AcceleratePerfHook:
    options.setdefault("schedule", SCHEDULE)
    return AcceleratePerfHook(output_dir=str(tmp_path / "perf"), degradation_threshold=1e6, **options).register(acc)


def within(inner: dict[str, Any], outer: dict[str, Any]) -> bool:
    return bool(outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"])


def test_a_plain_loops_first_step_begins_at_its_first_backward(tmp_path: Path) -> None:
    """Step 0 of a loop without hook.iter() has no step before it to begin at: it begins at the first backward."""
    acc = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    parts = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(64))
    hook = hook_on(acc, tmp_path, schedule={"skip_first": 0, "wait": 0, "warmup": 0, "active": 2})
    with hook:
        plain_loop(acc, parts)
    assert hook.optimizer_steps == hook.engine.steps_run == 16  # step 0 is a step of the engine too
    (path,) = hook.engine.exported
    assert profiler_steps(path) == {0, 1}
    (step0,) = spans(path, "ProfilerStep#0")
    marks = [e for e in spans(path, "perf_callbacks.") if step0["ts"] <= e["ts"] < step0["ts"] + step0["dur"]]
    assert [e["name"] for e in marks][:2] == ["perf_callbacks.backward", "perf_callbacks.optimizer_step"]
    assert "perf_callbacks.forward" not in {e["name"] for e in spans(path, "perf_callbacks.")}  # it cannot see one


@pytest.mark.parametrize("loop", ["iter", "plain"])
def test_an_optimizer_without_step_hooks_has_its_optimizer_step_span(tmp_path: Path, loop: str) -> None:
    """No torch pre/post hook: the span opens and closes around AcceleratedOptimizer.step(), in every micro-batch."""
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Linear(8, 1)
    model, dl = acc.prepare(model, data(64))
    opt = acc.prepare_optimizer(PlainOptimizer(model.parameters()))
    hook = hook_on(acc, tmp_path)
    with hook:
        for x, y in hook.iter(dl) if loop == "iter" else dl:
            with acc.accumulate(model):
                acc.backward(nn.functional.mse_loss(model(x), y))
                opt.step()
                with torch.profiler.record_function("user.after_step"):  # not the optimizer's time
                    opt.zero_grad()
    assert hook.optimizer_steps == 8
    for path in hook.engine.exported:
        steps, after = spans(path, "perf_callbacks.optimizer_step"), spans(path, "user.after_step")
        assert len(steps) == 4  # 2 optimizer steps of 2 micro-batches each; the first does not sync
        followed = [(s, next((u for u in after if u["ts"] >= s["ts"]), None)) for s in steps]
        followed = [(s, u) for s, u in followed if u is not None]  # a plain loop's window ends at its last step
        assert len(followed) >= 3
        for step, user in followed:  # ends before the user's code that follows, whether the micro-batch synced or not
            assert step["ts"] + step["dur"] <= user["ts"], (loop, step, user)


@pytest.mark.parametrize("loop", ["iter", "plain"])
def test_the_metrics_flush_is_set_aside_as_our_own_time(tmp_path: Path, loop: str) -> None:
    """The interval's flush (a gather across ranks) is our own time: in a window, inside a perf_callbacks.overhead
    span, which the analysis sets aside from the step's time."""
    acc = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    parts = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(64))
    hook = hook_on(acc, tmp_path, log_every_n_steps=2)
    flush, seen = hook.metrics.flush, []

    def marked_flush(step: int) -> None:
        with torch.profiler.record_function("test.flush"):
            seen.append(step)
            flush(step)

    hook.metrics.flush = marked_flush
    with hook:
        if loop == "iter":
            model, opt, dl = parts
            for x, y in hook.iter(dl):
                acc.backward(nn.functional.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
        else:
            plain_loop(acc, parts)
    assert seen == list(range(2, 17, 2))
    flushes = [f for p in hook.engine.exported for f in spans(p, "test.flush")]
    overhead = [o for p in hook.engine.exported for o in spans(p, "perf_callbacks.overhead")]
    assert flushes, "a flush at a logging step inside a window"
    for f in flushes:
        assert any(within(f, o) for o in overhead), f


def test_a_micro_batch_that_does_not_sync_leaves_the_users_phase_open(tmp_path: Path) -> None:
    """AcceleratedOptimizer.step() of a micro-batch that does not sync does nothing: a phase the user opened around it
    goes on (only an optimizer without torch step hooks had a phase of ours to end there)."""
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(64))
    hook = hook_on(acc, tmp_path)
    with hook:
        for x, y in hook.iter(dl):
            with acc.accumulate(model):
                acc.backward(nn.functional.mse_loss(model(x), y))
                with hook.phase("update"):
                    opt.step()
                    with torch.profiler.record_function("user.zero_grad"):
                        opt.zero_grad()
    assert hook.optimizer_steps == 8
    for path in hook.engine.exported:
        update, zero = spans(path, "perf_callbacks.update"), spans(path, "user.zero_grad")
        assert len(zero) == 4
        # inside only in the micro-batches that do not sync: in the others the optimizer_step phase took over
        assert sum(any(within(z, u) for u in update) for z in zero) == 2

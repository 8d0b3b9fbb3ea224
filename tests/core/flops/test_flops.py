"""FLOPs per optimizer step through the engine (no framework): counted on one real step, or given; TFLOP/s and MFU."""

from __future__ import annotations

import copy
import gzip
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import cast
from unittest import mock

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import RunContext
from perf_callbacks.core.flops.count import StepCounter, extra_formulas
from perf_callbacks.core.flops.peak import peak_flops
from perf_callbacks.core.flops.step import META_KEY, StepFlops
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from tests.core.flops_helpers import Distilled, Step, make_engine, mlp, once, train


def block() -> nn.Module:
    return nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)


def twice(model: nn.Module, x: torch.Tensor) -> None:  # e.g. a siamese loss: the model runs twice per step
    (model(x) - model(x.flip(0))).square().mean().backward()


def counted_by_test(model: nn.Module, x: torch.Tensor, step_fn: Step = once, times: int = 1) -> int:
    """FlopCounterMode run by the test on the same computation (the CPU attention formulas added, as ours)."""
    model = copy.deepcopy(model)
    with FlopCounterMode(display=False, custom_mapping=extra_formulas()) as counter:
        for _ in range(times):
            step_fn(model, x)
    return int(counter.get_total_flops())


@pytest.mark.parametrize(("make", "shape"), [(mlp, (8, 32)), (block, (4, 6, 32))], ids=["mlp", "transformer_block"])
@pytest.mark.parametrize(("accumulate", "step_fn", "calls"), [(1, once, 1), (4, once, 4), (1, twice, 1)],
                         ids=["one_batch", "accumulate_4", "called_twice"])
def test_counted_flops_equal_flop_counter_mode_on_the_same_step(tmp_path: Path, make: Callable[[], nn.Module],
                                                                 shape: tuple[int, ...], accumulate: int,
                                                                 step_fn: Step, calls: int) -> None:
    torch.manual_seed(0)
    model, x = make(), torch.randn(*shape)
    expected = counted_by_test(model, x, step_fn, times=calls)
    engine = make_engine(tmp_path)
    train(engine, model, x, steps=3, accumulate=accumulate, step_fn=step_fn)
    engine.close()
    assert engine.flops.counted_step == 0
    assert engine.flops.per_step == pytest.approx(expected, rel=0.01)
    assert engine.flops.per_step == pytest.approx(accumulate * counted_by_test(model, x, step_fn), rel=0.01)
    assert "FlopCounterMode on step 0" in engine.flops.source
    assert _get_current_dispatch_mode_stack() == []


def test_the_attention_of_a_cpu_transformer_block_is_counted(tmp_path: Path) -> None:
    """torch's registry has no formula for the CPU flash-attention ops: ours adds the CUDA ones' formulas."""
    torch.manual_seed(0)
    model, x = block(), torch.randn(4, 6, 32)
    with FlopCounterMode(display=False) as plain:
        once(copy.deepcopy(model), x)
    engine = make_engine(tmp_path)
    train(engine, model, x, steps=2)
    b, seq, dim = x.shape
    q = (b, 4, seq, dim // 4)  # 4 heads
    attention = sdpa_flop_count(q, q, q) + sdpa_backward_flop_count(q, q, q, q)  # torch's formulas for CUDA's ops
    assert attention > 0.03 * plain.get_total_flops()
    assert engine.flops.per_step == plain.get_total_flops() + attention


class SwiGLU(nn.Module):
    """A LLaMA/Mistral/Qwen MLP: ``down(silu(gate(x)) * up(x))``; its backward runs ``aten.silu_backward``."""

    def __init__(self, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(dim, hidden), nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


def mish_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.Mish(), nn.Linear(64, 32))


@pytest.mark.parametrize("make", [block, SwiGLU, mish_mlp], ids=["transformer_block", "swiglu", "mish"])
def test_counting_changes_no_numerics(tmp_path: Path, make: Callable[[], nn.Module]) -> None:
    """FlopCounterMode runs ``silu_backward`` and ``mish_backward`` decomposed, which rounds differently: ours not."""
    torch.manual_seed(0)
    a, x = make(), torch.randn(4, 6, 32)
    b = copy.deepcopy(a)
    counted = make_engine(tmp_path / "a")
    train(counted, a, x, steps=4)
    train(make_engine(tmp_path / "b", flops=False), b, x, steps=4)
    assert counted.flops.per_step == counted_by_test(b, x)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_an_op_flop_counter_mode_decomposes_is_counted_on_meta_tensors_and_runs_whole(tmp_path: Path) -> None:
    """Under inference mode ``aten.linear`` reaches the mode whole: FlopCounterMode counts its decomposition."""
    torch.manual_seed(0)
    model, x = Distilled(), torch.randn(8, 32)
    engine = make_engine(tmp_path)
    train(engine, model, x, steps=2)
    assert engine.flops.per_step == counted_by_test(model, x)
    assert engine.flops.per_step == counted_by_test(model.student, x) + 2 * 8 * (32 * 64 + 64 * 16)  # + teacher


def test_an_op_whose_decomposition_reads_values_runs_whole_and_skips_the_count_with_a_note(tmp_path: Path) -> None:
    """Its decomposition cannot run on meta tensors, and running it on the real ones could change numerics."""
    lib = torch.library.Library("perf_callbacks_test", "FRAGMENT")  # a test op, freed below
    lib.define("scaled_matmul(Tensor a, Tensor b) -> Tensor")
    lib.impl("scaled_matmul", lambda a, b: (a @ b) / max(float(a.abs().max().item()), 1.0),
             "CompositeImplicitAutograd")

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode():
                scale = torch.ops.perf_callbacks_test.scaled_matmul(x, x.T).sum()
            return self.net(x) * scale.clone()

    engine = make_engine(tmp_path)
    try:
        train(engine, Scaled(), torch.randn(8, 32), steps=2)
    finally:
        del lib
    assert engine.flops.per_step is None and not engine._flops_on
    assert engine.flops.note.startswith(
        "not measured: ops without a FLOP formula ran in step 0 (perf_callbacks_test.scaled_matmul x1)")


def test_a_higher_order_operator_without_a_formula_runs_as_called_and_is_noted() -> None:
    """``torch.cond``: FlopCounterMode runs both branches (and counts the larger); ours runs the op as called."""
    x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4)
    counter = StepCounter()
    counter.start()
    try:
        out = torch.cond(x.sum() > -1e9, lambda v: (v @ w).relu(), lambda v: v * 2, (x,))
    finally:
        assert counter.stop()
    assert torch.equal(out, (x @ w).relu())
    assert counter.uncounted == {"cond": 1} and counter.total == 0


def test_after_the_counted_step_the_hot_path_never_calls_the_counter(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    model, x = mlp(), torch.randn(8, 32)
    train(engine, model, x, steps=3)
    assert not engine._flops_on
    with mock.patch.object(engine.flops, "batch_start") as start, mock.patch.object(engine.flops, "batch_end") as end:
        train(engine, model, x, steps=5)
    assert start.call_count == end.call_count == 0
    assert _get_current_dispatch_mode_stack() == []


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_counted_step_is_set_aside_and_metrics_use_the_median_step_time(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, every=6, peak_tflops=1.0)
    model, x, clock = mlp(), torch.randn(8, 32), FakeClock()
    engine.attach_model(model)
    with mock.patch("time.perf_counter", clock):
        for step in range(7):
            engine.data_start()
            engine.data_end()
            engine.batch_start(step)
            once(model, x)
            clock.t += 10.0 if step == 0 else 0.1 + 0.01 * step  # the counted step is slow: left out
            engine.batch_end(True, samples=8)
    (_, metrics), = logged
    measured = [0.1 + 0.01 * s for s in (1, 2, 3, 4)]  # logged at step 5's end: step 5's time is not known yet
    assert metrics["perf/train/samples_per_sec"] == pytest.approx(8 * 4 / sum(measured))
    median_s = metrics["perf/train/step_time_ms"] / 1e3
    assert median_s == pytest.approx(0.125)
    flops = engine.flops.per_step
    assert metrics["perf/train/tflops"] == pytest.approx(flops / median_s / 1e12, rel=1e-9)
    assert metrics["perf/train/mfu"] == pytest.approx(flops / median_s / 1e12, rel=1e-9)  # peak 1 TFLOP/s


def test_a_counted_first_step_is_the_data_wait_warm_up(tmp_path: Path) -> None:
    """The data-wait check skips the first step it sees (one-time costs); a counted step 0 already was that step."""
    from perf_callbacks.exceptions import DataLoaderWarning

    engine = make_engine(tmp_path, data_wait_steps=3)
    engine.ctx.data_loader = ("train_dataloader", 0)
    model, x, clock = mlp(), torch.randn(8, 32), FakeClock()
    engine.attach_model(model)
    with mock.patch("time.perf_counter", clock), pytest.warns(
            DataLoaderWarning, match=r"data loading took 30% of step time over steps 1-3"):
        for step in range(5):  # step 3's time is known when step 4 begins
            engine.data_start()
            clock.t += 0.03
            engine.data_end()
            engine.batch_start(step)
            once(model, x)
            clock.t += 0.07
            engine.batch_end(True, samples=8)
    assert engine.flops.counted_step == 0


def test_given_flops_per_step_wins_and_nothing_is_counted(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, flops_per_step=2e9)
    with mock.patch("perf_callbacks.core.flops.step.StepCounter") as counter:
        train(engine, mlp(), torch.randn(8, 32), steps=6)
    assert counter.call_count == 0 and not engine._flops_on and engine.flops.counted_step is None
    assert engine.flops.per_step == 2e9 and engine.flops.source == "flops_per_step (config)"
    (_, metrics), = logged
    assert metrics["perf/train/tflops"] == pytest.approx(2e9 / (metrics["perf/train/step_time_ms"] / 1e3) / 1e12)
    assert "perf/train/mfu" not in metrics  # no peak on a CPU without peak_tflops


def test_a_flops_per_batch_attribute_times_micro_batches_wins_over_counting(tmp_path: Path) -> None:
    model = mlp()
    model.flops_per_batch = 3e6  # type: ignore[assignment]
    engine = make_engine(tmp_path)
    with mock.patch("perf_callbacks.core.flops.step.StepCounter") as counter:
        train(engine, model, torch.randn(8, 32), steps=3, accumulate=4)
    assert counter.call_count == 0 and engine.flops.counted_step is None
    assert engine.flops.per_step == 4 * 3e6
    assert engine.flops.source == "flops_per_batch 3e+06 x 4 micro-batches"


@pytest.mark.parametrize("given", [np.int64(3_000_000), torch.tensor(3e6), np.float32(3e6)],
                         ids=["np.int64", "0-d tensor", "np.float32"])
def test_a_flops_per_batch_of_any_numeric_type_gives_tflops_and_mfu(tmp_path: Path, given: object) -> None:
    model = mlp()
    model.flops_per_batch = given  # type: ignore[assignment]
    logged: list = []
    engine = make_engine(tmp_path, logged, peak_tflops=1.0)
    train(engine, model, torch.randn(8, 32), steps=5, accumulate=2)
    assert engine.flops.per_step == 2 * 3e6 and engine.flops.source == "flops_per_batch 3e+06 x 2 micro-batches"
    (_, metrics), = logged
    step_s = metrics["perf/train/step_time_ms"] / 1e3
    assert metrics["perf/train/tflops"] == pytest.approx(6e6 / step_s / 1e12)
    assert metrics["perf/train/mfu"] == pytest.approx(metrics["perf/train/tflops"] / 1.0)


@pytest.mark.parametrize("given", [float("inf"), float("nan"), -5e6, 0, np.float64("inf"), torch.tensor(-1.0), "3e6",
                                   torch.ones(2)])
def test_a_flops_per_batch_that_is_no_finite_positive_number_is_ignored_with_one_warning(
        tmp_path: Path, given: object) -> None:
    model = mlp()
    model.flops_per_batch = given  # type: ignore[assignment]
    logged: list = []
    engine = make_engine(tmp_path, logged, peak_tflops=1.0)
    with pytest.warns(InstrumentUnavailableWarning, match=r"the model's flops_per_batch must be a finite number > 0, "
                                                          r"got .*: it is ignored") as rec:
        train(engine, model, torch.randn(8, 32), steps=5)
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert engine.flops.source.startswith("counted")  # measured as without it
    (_, metrics), = logged
    assert math.isfinite(metrics["perf/train/tflops"]) and metrics["perf/train/tflops"] < 1.0


def test_flops_false_counts_nothing_and_says_so(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, flops=False)
    with mock.patch("perf_callbacks.core.flops.step.StepCounter") as counter:
        train(engine, mlp(), torch.randn(8, 32), steps=3)
    assert counter.call_count == 0 and engine.flops.per_step is None and not engine._flops_on
    assert engine.flops.note == "not measured (flops: false): set flops_per_step"


def test_ops_without_a_flop_formula_skip_the_count_with_a_note(tmp_path: Path) -> None:
    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm, self.head = nn.LSTM(16, 32, batch_first=True), nn.Linear(32, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.lstm(x)[0])

    engine = make_engine(tmp_path)
    train(engine, Recurrent(), torch.randn(4, 5, 16), steps=3)
    assert engine.flops.per_step is None and not engine._flops_on
    assert engine.flops.note.startswith("not measured: ops without a FLOP formula ran in step 0 (aten.mkldnn_rnn_layer")
    assert engine.flops.counted_step == 0  # it ran through the counter all the same: left out of step time


def test_the_counting_step_is_outside_every_window_and_its_trace_carries_the_flops(tmp_path: Path) -> None:
    engine = make_engine(tmp_path / "a", schedule={"skip_first": 2, "wait": 1, "warmup": 1, "active": 2},
                         peak_tflops=1.0)
    train(engine, mlp(), torch.randn(8, 32), steps=8)
    engine.close()
    assert engine.flops.counted_step == 0
    (trace,) = engine.exported
    assert json.load(gzip.open(trace))[META_KEY] == {
        "flops_per_step": engine.flops.per_step, "source": "counted with FlopCounterMode on step 0", "note": "",
        "dtype": "fp32", "peak_tflops": 1.0, "peak_source": "peak_tflops: 1", "flops_by_op": engine.flops.by_op}
    early = make_engine(tmp_path / "b", schedule={"skip_first": 0, "wait": 0, "warmup": 1, "active": 2})
    train(early, mlp(), torch.randn(8, 32), steps=5)
    early.close()
    assert early.flops.counted_step == 3  # warm-up step 0, window 1-2: step 3 is the first outside it
    meta = json.load(gzip.open(early.exported[0]))[META_KEY]
    assert meta["flops_per_step"] is None and meta["note"].startswith("not known yet when this window started")


@pytest.mark.parametrize(("make", "shape"), [(mlp, (8, 32)), (block, (4, 6, 32))], ids=["mlp", "transformer_block"])
def test_per_operator_flops_in_the_trace_equal_flop_counter_mode_run_by_the_test(
        tmp_path: Path, make: Callable[[], nn.Module], shape: tuple[int, ...]) -> None:
    """Without recorded shapes the roofline takes each op's FLOPs from the trace's ``flops_by_op``: FlopCounterMode's
    own per-operator counts (``aten::mm``...), written by the run."""
    torch.manual_seed(0)
    model, x = make(), torch.randn(*shape)
    with FlopCounterMode(display=False, custom_mapping=extra_formulas()) as counter:
        once(copy.deepcopy(model), x)
    expected = {str(op).replace(".", "::", 1): int(n) for op, n in counter.get_flop_counts()["Global"].items() if n}
    engine = make_engine(tmp_path, schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 1})
    train(engine, model, x, steps=5)
    engine.close()
    meta = json.load(gzip.open(engine.exported[0]))[META_KEY]
    assert meta["flops_by_op"] == expected
    assert "aten::addmm" in expected and sum(expected.values()) == meta["flops_per_step"]


def test_an_abandoned_counting_step_is_dropped_and_counted_again(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    model, x = mlp(), torch.randn(8, 32)
    engine.attach_model(model)
    engine.batch_start(0)
    once(model, x)
    engine.batch_end(False)  # step 0 never completes its optimizer step (a skipped step, say)
    engine.batch_start(1)  # the adapter moves on to step 1: the count of step 0 is dropped, step 1 is counted
    assert len(_get_current_dispatch_mode_stack()) == 1
    once(model, x)
    engine.batch_end(True)
    assert _get_current_dispatch_mode_stack() == []
    assert engine.flops.counted_step == 1 and engine.flops.per_step == counted_by_test(model, x)


def test_an_exception_in_the_counting_step_leaves_the_mode(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    engine.batch_start(0)
    assert len(_get_current_dispatch_mode_stack()) == 1
    engine.close(RuntimeError("boom"))
    assert _get_current_dispatch_mode_stack() == []
    assert engine.flops.per_step is None and engine.flops.note == "not measured: training ended inside the counting step"


def test_another_mode_left_open_in_the_step_is_never_popped_by_ours(tmp_path: Path) -> None:
    class Theirs(FlopCounterMode):
        pass

    engine = make_engine(tmp_path)
    engine.batch_start(0)
    theirs = Theirs(display=False)
    theirs.__enter__()  # entered inside our counting step, still open when the step ends
    torch.randn(2, 2) @ torch.randn(2, 2)
    engine.batch_end(True)
    stack = _get_current_dispatch_mode_stack()
    assert len(stack) == 2 and stack[-1] is theirs.mode  # theirs is still on top, ours waits under it
    theirs.__exit__(None, None, None)
    engine.batch_start(1)  # ours is on top again: left at the next hook
    assert _get_current_dispatch_mode_stack() == []
    assert engine.flops.per_step is None and "another TorchDispatchMode" in engine.flops.note
    engine.batch_end(True)
    assert not engine._flops_on


def test_a_failing_counter_disables_itself_and_training_goes_on(tmp_path: Path) -> None:
    from perf_callbacks.exceptions import InstrumentUnavailableWarning

    engine = make_engine(tmp_path)
    with mock.patch("perf_callbacks.core.flops.step.StepCounter", side_effect=RuntimeError("no dispatch")), \
            pytest.warns(InstrumentUnavailableWarning, match="FLOP counting disabled: RuntimeError: no dispatch"):
        train(engine, mlp(), torch.randn(8, 32), steps=4)
    assert not engine._flops_on and engine.flops.per_step is None and engine.steps_run == 4


def test_a_formula_that_raises_inside_the_step_never_fails_it(tmp_path: Path) -> None:
    """The op's own result goes back to the step; the count is dropped with one warning and training goes on."""
    from perf_callbacks.exceptions import InstrumentUnavailableWarning

    torch.manual_seed(0)
    a, x = SwiGLU(), torch.randn(4, 6, 32)
    b = copy.deepcopy(a)
    engine = make_engine(tmp_path / "a")
    with mock.patch.object(StepCounter, "count", side_effect=RuntimeError("bad formula")), \
            pytest.warns(InstrumentUnavailableWarning, match="FLOP counting disabled: RuntimeError: bad formula"):
        train(engine, a, x, steps=3)
    train(make_engine(tmp_path / "b", flops=False), b, x, steps=3)
    assert engine.steps_run == 3 and engine.flops.per_step is None and not engine._flops_on
    assert _get_current_dispatch_mode_stack() == []
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_peak_comes_from_lightnings_table_for_the_counted_dtype(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    engine.ctx.device = torch.device("cuda", 0)
    model, x = mlp(), torch.randn(8, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        train(engine, model, x, steps=3)
    table = mock.Mock(return_value=989e12)
    with mock.patch("lightning.fabric.utilities.throughput.get_available_flops", table), \
            mock.patch("torch.cuda.get_device_name", return_value="NVIDIA H100 80GB HBM3"):
        peak, source = engine.flops.peak()
    assert table.call_args.args == (torch.device("cuda", 0), torch.bfloat16)
    assert (peak, source) == (989e12, "Lightning's get_available_flops for NVIDIA H100 80GB HBM3, bf16")


def test_peak_is_unknown_with_a_reason_and_the_override_wins() -> None:
    cuda = torch.device("cuda", 0)
    with mock.patch("lightning.fabric.utilities.throughput.get_available_flops", return_value=None), \
            mock.patch("torch.cuda.get_device_name", return_value="NVIDIA H200"):
        assert peak_flops(cuda, torch.bfloat16) == (
            None, "NVIDIA H200 with bf16 is not in Lightning's table of peak FLOP/s: set peak_tflops")
        assert peak_flops(cuda, torch.bfloat16, override_tflops=989.5) == (989.5e12, "peak_tflops: 989.5")
    with mock.patch("lightning.fabric.utilities.throughput.get_available_flops", side_effect=KeyError("TYPE")), \
            mock.patch("torch.cuda.get_device_name", return_value="X"):
        assert peak_flops(cuda, torch.float16)[0] is None
    assert peak_flops(None, torch.float32) == (None, "no peak FLOP/s is known for CPUs: set peak_tflops")


def test_without_a_counted_step_the_dtype_is_the_adapters_then_the_parameters(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, flops_per_step=1e9)
    engine.attach_model(mlp().to(torch.bfloat16))
    assert engine.flops.compute_dtype() is torch.bfloat16
    engine.ctx.compute_dtype = torch.float16
    assert engine.flops.compute_dtype() is torch.float16


def counted_step_with(tmp_path: Path, model: nn.Module, compiled: bool = False, **options: object) -> StepFlops:
    """StepFlops driven by hand (no engine) over 6 steps of ``model``, as the engine calls it."""
    flops = StepFlops(PerfConfig.from_dict({"summary": False, **options}),
                      RunContext(output_dir=tmp_path, run_name="run"), lambda *args: None)
    flops.model, flops.compiled = model, compiled
    x = torch.randn(2, 32)
    for step in range(6):
        if flops.wants_hooks:
            flops.batch_start(step, 0, False)
        if not compiled and not hasattr(model, "_orig_mod"):
            once(model, x)
        if flops.wants_hooks:
            flops.batch_end(True, 1)
    return flops


def test_the_counted_step_is_the_first_after_the_nsight_range_both_ends_included(tmp_path: Path) -> None:
    flops = counted_step_with(tmp_path, mlp(), nsys_capture=True, nsys_steps=[0, 2])
    assert flops.counted_step == 3 and flops.per_step == counted_by_test(mlp(), torch.randn(2, 32))
    assert counted_step_with(tmp_path, mlp(), nsys_capture=True, nsys_steps=[1, 1]).counted_step == 0


def test_a_compiled_model_is_never_run_under_the_counter(tmp_path: Path) -> None:
    """A model the adapter says is compiled, or one wrapped by torch.compile (never run here: only looked at)."""
    with mock.patch("perf_callbacks.core.flops.step.StepCounter") as counter:
        told = counted_step_with(tmp_path, mlp(), compiled=True)
        wrapped = counted_step_with(tmp_path, cast(nn.Module, torch.compile(mlp())))
    assert counter.call_count == 0
    for flops in (told, wrapped):
        assert flops.counted_step is None and flops.per_step is None and not flops.wants_hooks
        assert flops.note.startswith("not measured: the model is compiled (torch.compile)")

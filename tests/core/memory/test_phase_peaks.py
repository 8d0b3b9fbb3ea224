"""Peak memory by phase: the state machine, its wiring in the engine (one measured step per logging interval, no
extra call on any other step), and on CUDA a known model whose largest peak must land in the right phase."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.memory.phase_peaks import PhasePeaks
from tests.core.engine_helpers import HostPeak, make_engine


def test_each_phase_gets_its_own_peak_and_micro_batches_keep_the_largest() -> None:
    dev = HostPeak()
    peaks = PhasePeaks(dev.read_and_reset, total_bytes=80 * 10**9)
    peaks.arm(7)
    peaks.boundary("forward", 7)
    for activations in (300, 500):  # two micro-batches
        dev.alloc(activations)
        peaks.boundary("backward", 7)
        dev.alloc(100)
        dev.free(activations + 100)
        peaks.boundary("forward", 7)
    dev.alloc(1000)  # one optimizer step after the last micro-batch's forward
    dev.free(400)
    peaks.boundary("optimizer_step", 7)
    dev.alloc(50)
    assert not peaks.boundary("optimizer_step", 7)
    assert peaks.boundary("data_wait", 8)  # the next step opened: done
    assert peaks.step == 7
    assert peaks.last == {"forward": 1000.0, "backward": 600.0, "optimizer_step": 650.0}
    assert peaks.headline() == "peak in forward: 1.0 of 80 GB (step 7)"


def test_reset_peaks_are_merged_back_into_the_interval_peak() -> None:
    dev = HostPeak()
    peaks = PhasePeaks(dev.read_and_reset)
    dev.alloc(900)
    dev.free(900)  # the interval's real peak happened before the measured step
    peaks.arm(3)
    peaks.boundary("forward", 3)
    dev.alloc(10)
    peaks.boundary("data_wait", 4)
    logged = {"memory/peak_allocated_mb": 10.0}
    assert peaks.metrics(logged) == {"memory/peak_forward_mb": 10.0}
    assert logged["memory/peak_allocated_mb"] == 900.0
    assert peaks.metrics({"memory/peak_allocated_mb": 1.0}) == {"memory/peak_forward_mb": 10.0}  # carry cleared


def drive(engine, dev: HostPeak, steps: int) -> None:  # noqa: ANN001
    for step in range(steps):
        dev.step = step
        engine.batch_start(step)
        dev.alloc(10 * (step + 1))  # forward: activations grow with the step, so the logged step is visible
        engine.phase("backward")
        dev.alloc(5)
        dev.free(10 * (step + 1) + 5)
        engine.end_phase()
        engine.phase("optimizer_step")
        dev.alloc(2)
        dev.free(2)
        assert engine.mem.armed == (step in (0, 5, 10))  # phase boundaries are reported only on measured steps
        engine.batch_end(stepped=True, samples=8)


def test_engine_measures_the_first_step_then_one_step_after_each_log(tmp_path: Path) -> None:
    dev, logged = HostPeak(), []
    with mock.patch.object(PhasePeaks, "for_device", return_value=PhasePeaks(dev.read_and_reset, 80 * 10**9)):
        engine = make_engine(tmp_path, logged, schedule={"skip_first": 100}, degradation_threshold=1e6)
    drive(engine, dev, 12)
    engine.close()
    # read at each boundary of the measured steps (0, 5, 10: forward, backward, optimizer_step, then the framework
    # phase after the optimizer step), and once when the next step's first phase begins; never on any other step
    assert Counter(dev.reads) == {0: 4, 1: 1, 5: 4, 6: 1, 10: 4, 11: 1}
    by_step = {step: {k: v for k, v in m.items() if "peak_" in k and "rss" not in k} for step, m in logged}
    assert by_step[5] == {"perf/memory/peak_forward_mb": 10.0, "perf/memory/peak_backward_mb": 15.0,
                          "perf/memory/peak_optimizer_step_mb": 2.0}  # step 0
    assert by_step[10]["perf/memory/peak_forward_mb"] == 60.0  # step 5
    assert engine.mem.peaks is not None and engine.mem.peaks.step == 10 and not engine.mem.armed


def test_cpu_runs_have_no_phase_peaks(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    assert PhasePeaks.for_device(torch.device("cpu")) is None and engine.mem.peaks is None
    assert not engine.mem.armed


# ---- CUDA ----------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("expected", ["backward", "optimizer_step"])
def test_known_model_peaks_in_the_right_phase(tmp_path: Path, expected: str) -> None:
    """Wide activations and SGD peak in backward; a large weight with Adam's first step peaks in optimizer_step."""
    device = torch.device("cuda", torch.cuda.current_device())
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 100}, "summary": False, "nvml": False})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", device=device))
    assert engine.mem.peaks is not None
    if expected == "backward":  # 9 x 256 MB of activations held to backward, which adds its gradients; 64 KB of weights
        model = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(8)]).to(device)
        x = torch.randn(2**19, 128, device=device)
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    else:  # a 1 GB weight: grad 1 GB, Adam's first step adds 2 GB of state; activations are tiny
        model = torch.nn.Linear(2**14, 2**14, bias=False).to(device)
        x = torch.randn(4, 2**14, device=device)
        opt = torch.optim.Adam(model.parameters())
    engine.batch_start(0)
    loss = model(x).sum()  # sum() saves nothing: forward's peak is exactly the activations it keeps
    engine.phase("backward")
    loss.backward()
    engine.end_phase()
    engine.phase("optimizer_step")
    opt.step()
    engine.batch_end(stepped=True)
    torch.cuda.synchronize()
    engine.close()
    last = engine.mem.peaks.last
    assert max(last, key=last.__getitem__) == expected, last
    assert engine.mem.peaks.headline().startswith(f"peak in {expected}: ")

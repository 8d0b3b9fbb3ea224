"""The engine without any framework: steps are driven by hand, as an adapter would."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from unittest import mock

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine import PerfEngine, RunContext
from perf_callbacks.exceptions import (
    DataLoaderWarning,
    PerformanceDegradationWarning,
    TraceSizeWarning,
)


def make_engine(tmp_path: Path, logged: list | None = None, **options: object) -> PerfEngine:
    options.setdefault("summary", False)
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 2, "wait": 1, "warmup": 1, "active": 2}, **options})
    ctx = RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=5,
                     log_metrics=(lambda m, s: logged.append((s, m))) if logged is not None else None)
    return PerfEngine(cfg, ctx)


def run_steps(engine: PerfEngine, steps: int, accumulate: int = 1, start: int = 0) -> None:
    x = torch.randn(8, 8, requires_grad=True)
    for step in range(start, start + steps):
        for micro in range(accumulate):
            engine.batch_start(step)
            (x @ x).sum().backward()
            engine.batch_end(stepped=micro == accumulate - 1, samples=8)


def trace_steps(path: Path) -> list[int]:
    events = json.load(gzip.open(path))["traceEvents"]
    return sorted(int(e["name"].split("#")[1]) for e in events if e.get("name", "").startswith("ProfilerStep#"))


def test_windows_follow_the_schedule_and_repeat(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 2, "wait": 1, "warmup": 1, "active": 2, "repeat": 2})
    run_steps(engine, 14)
    engine.close()
    assert [p.parent.name for p in engine.exported] == ["window-000004-000005", "window-000008-000009"]
    assert [trace_steps(p) for p in engine.exported] == [[4, 5], [8, 9]]
    assert all(p.name == "rank0.pt.trace.json.gz" for p in engine.exported)
    assert not torch.autograd.profiler._is_profiler_enabled


def test_gradient_accumulation_numbers_optimizer_steps(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    run_steps(engine, 8, accumulate=3)
    engine.close()
    (path,) = engine.exported
    assert trace_steps(path) == [4, 5]
    events = json.load(gzip.open(path))["traceEvents"]
    forwards = [e for e in events if e.get("name") == "perf_callbacks.forward"]
    assert len(forwards) == 2 * 3  # one forward phase per micro-batch, only inside the recorded steps


def test_trace_has_distributed_info_and_no_other_json(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    run_steps(engine, 7)
    (path,) = engine.exported
    data = json.load(gzip.open(path))
    assert data["distributedInfo"] == {"backend": "", "rank": 0, "world_size": 1}
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_untraced_rank_exports_nothing(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, ranks=[1])
    run_steps(engine, 8)
    engine.close()
    assert engine.exported == []


def test_exception_mid_window_flushes_partial_trace(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    run_steps(engine, 4)  # steps 0-3; step 4 (first active) is now open
    engine.batch_start(4)
    assert torch.autograd.profiler._is_profiler_enabled
    engine.close(RuntimeError("boom"))
    assert not torch.autograd.profiler._is_profiler_enabled
    (path,) = engine.exported
    assert trace_steps(path) == [4]
    assert engine.nvtx.depth == 0
    engine.close()  # idempotent


def test_trace_size_cap_skips_export(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, max_trace_mb=0.0001)
    with pytest.warns(TraceSizeWarning, match="above max_trace_mb=0.0001; it was not written"):
        run_steps(engine, 7)
    assert engine.exported == []
    assert not list(tmp_path.rglob("*.json*"))
    assert not list(tmp_path.rglob("*.partial"))


def test_metrics_logged_every_n_steps_without_window_steps(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged)
    run_steps(engine, 10)
    assert [s for s, _ in logged] == [5, 10]
    step, metrics = logged[0]
    assert {"perf/train/step_time_ms", "perf/train/data_wait_fraction", "perf/train/samples_per_sec",
            "perf/memory/host_rss_mb"} <= set(metrics)
    assert metrics["perf/memory/host_rss_mb"] > 1


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_data_wait_share_and_warning_with_fake_clock(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 1000}, data_wait_steps=4)
    engine.ctx.data_loader = ("train_dataloader", 0)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock), pytest.warns(
        DataLoaderWarning, match=r"train_dataloader has num_workers=0; data loading took 30% of step time over steps 1-4"
    ):
        for step in range(5):
            clock.t += 0.03  # data wait
            engine.batch_start(step)
            clock.t += 0.07  # compute
            engine.batch_end(stepped=True, samples=10)
    (_, metrics) = logged[0]
    assert metrics["perf/train/step_time_ms"] == pytest.approx(100.0)
    assert metrics["perf/train/data_wait_fraction"] == pytest.approx(0.3)
    assert metrics["perf/train/samples_per_sec"] == pytest.approx(100.0)


def test_validation_time_is_not_data_wait(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 1000}, data_wait_steps=1000)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        for step in range(5):
            engine.batch_start(step)
            clock.t += 0.1
            engine.batch_end(stepped=True)
            engine.validation_start()
            clock.t += 5.0
            engine.validation_end()
    (_, metrics) = logged[0]
    assert metrics["perf/train/step_time_ms"] == pytest.approx(100.0)
    assert metrics["perf/train/data_wait_fraction"] == pytest.approx(0.0)


def test_degradation_warning(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, [], schedule={"skip_first": 1000}, degradation_threshold=0.2)
    clock = FakeClock()
    durations = [0.1] * 10 + [0.11] * 5 + [0.15] * 5  # baseline 100 ms; +10% is fine; +50% warns
    with mock.patch("time.perf_counter", clock), pytest.warns(
        PerformanceDegradationWarning, match=r"median step time 150.0 ms .* is 50% above this run's early baseline"
    ):
        for step, d in enumerate(durations):
            engine.batch_start(step)
            clock.t += d
            engine.batch_end(stepped=True)


def test_nvtx_stays_balanced(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    engine.batch_start(0)
    engine.phase("backward")
    assert engine.nvtx.depth in (0, 2)  # 0 when the nvtx package has no tool attached
    engine.close()
    assert engine.nvtx.depth == 0


def test_checkpoint_time_is_neither_step_time_nor_data_wait(tmp_path: Path) -> None:
    logged: list = []
    engine = make_engine(tmp_path, logged, schedule={"skip_first": 1000}, data_wait_steps=1000)
    clock = FakeClock()
    with mock.patch("time.perf_counter", clock):
        for step in range(6):
            clock.t += 0.01  # data wait
            engine.batch_start(step)
            clock.t += 0.09
            engine.batch_end(stepped=True)
            engine.checkpoint_start()  # e.g. ModelCheckpoint after the step
            clock.t += 3.0
            engine.checkpoint_end()
    (_, metrics) = logged[0]
    assert metrics["perf/train/step_time_ms"] == pytest.approx(100.0)
    assert metrics["perf/train/data_wait_fraction"] == pytest.approx(0.1)

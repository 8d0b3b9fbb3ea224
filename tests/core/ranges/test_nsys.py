from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.ranges.nsys import NsysCapture
from perf_callbacks.exceptions import InstrumentUnavailableWarning


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> mock.MagicMock:
    """A fake CUDA: is_available() True, and profiler start/stop + synchronize recorded in one call list."""
    fake = mock.MagicMock()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    monkeypatch.setattr(torch.cuda.profiler, "start", fake.start)
    monkeypatch.setattr(torch.cuda.profiler, "stop", fake.stop)
    return fake


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def run_window(capture: NsysCapture, first: int, last: int) -> None:
    capture.start(first)
    capture.stop(last)


def profiler_calls(fake: mock.MagicMock) -> list[str]:
    return [name for name, _, _ in fake.mock_calls if name in ("start", "stop")]


def test_start_and_stop_happen_exactly_at_the_window_steps(cuda: mock.MagicMock) -> None:
    capture = NsysCapture(enabled=True, ranks=None, rank=0)
    seen: list[tuple[str, int]] = []
    cuda.start.side_effect = lambda: seen.append(("start", step))
    cuda.stop.side_effect = lambda: seen.append(("stop", step))

    for step in range(10):  # what the engine does around each optimizer step
        if 3 <= step <= 5:
            capture.start(step)
        assert capture.capturing is (3 <= step <= 5)
        if step == 5:
            capture.stop(step)
    capture.close()

    assert seen == [("start", 3), ("stop", 5)]
    # synchronize before each call keeps other steps' kernels out of the capture
    assert [name for name, _, _ in cuda.mock_calls] == ["synchronize", "start", "synchronize", "stop"]


def test_idempotent(cuda: mock.MagicMock) -> None:
    capture = NsysCapture(enabled=True)
    capture.stop(0)  # stop without start: nothing
    capture.start(1)
    capture.start(2)  # already capturing: nothing
    capture.stop(3)
    capture.stop(4)
    capture.close()

    assert profiler_calls(cuda) == ["start", "stop"]


def test_close_stops_a_running_capture(cuda: mock.MagicMock) -> None:
    capture = NsysCapture(enabled=True)
    capture.start(5)
    capture.close()
    capture.close()

    assert profiler_calls(cuda) == ["start", "stop"]
    assert not capture.capturing


@pytest.mark.parametrize(("ranks", "rank", "expected"), [(None, 3, 1), ({0, 2}, 2, 1), ({0, 2}, 1, 0), (set(), 0, 0)])
def test_only_selected_ranks_capture(cuda: mock.MagicMock, ranks: set[int] | None, rank: int, expected: int) -> None:
    capture = NsysCapture(enabled=True, ranks=ranks, rank=rank)
    capture.start(0)
    capture.stop(0)

    assert cuda.start.call_count == cuda.stop.call_count == expected
    assert capture.enabled is bool(expected)


def test_disabled_makes_no_cuda_call(cuda: mock.MagicMock) -> None:
    capture = NsysCapture(enabled=False)
    capture.start(0)
    capture.close()

    assert cuda.mock_calls == []


def test_without_cuda_warns_once_and_does_nothing(no_cuda: None) -> None:
    capture = NsysCapture(enabled=True)
    with pytest.warns(InstrumentUnavailableWarning, match=r"nsys capture needs CUDA.*nsys_capture=False") as record:
        capture.start(3)
    capture.start(4)
    capture.stop(5)
    capture.close()

    assert len(record) == 1
    assert not capture.enabled
    assert not capture.capturing


def test_the_real_call_never_raises() -> None:
    capture = NsysCapture(enabled=True)
    if torch.cuda.is_available():  # cudaProfilerStart/Stop without nsys attached are harmless no-ops
        capture.start(0)
        assert capture.capturing
    else:
        with pytest.warns(InstrumentUnavailableWarning):
            capture.start(0)
    capture.stop(0)
    assert not capture.capturing


def test_without_cuda_other_ranks_stay_quiet(no_cuda: None) -> None:
    capture = NsysCapture(enabled=True, ranks=None, rank=1)
    capture.start(0)  # a warning would fail the test (PerfWarning is an error)

    assert not capture.enabled


@pytest.mark.parametrize("failing", ["start", "stop"])
def test_a_failing_cuda_call_disables_with_one_warning(cuda: mock.MagicMock, failing: str) -> None:
    getattr(cuda, failing).side_effect = RuntimeError("cudaErrorProfilerDisabled")
    capture = NsysCapture(enabled=True)

    with pytest.warns(InstrumentUnavailableWarning, match=f"cudaProfiler{failing.title()} failed.*ProfilerDisabled"):
        run_window(capture, 1, 2)
    capture.start(3)
    capture.stop(4)
    capture.close()

    assert cuda.start.call_count == 1
    assert cuda.stop.call_count == (1 if failing == "stop" else 0)
    assert not capture.enabled
    assert not capture.capturing


# ---- the engine drives the capture ------------------------------------------------------------------------------------
def _engine_capture_steps(tmp_path: Path, cuda: mock.MagicMock, **options: object) -> list[tuple[str, str, int]]:
    """Run 12 optimizer steps through the engine and return (call, driver hook, step) for each profiler API call."""
    config = PerfConfig.from_dict({"nsys_capture": True, "summary": False, "degradation_threshold": 1e6, **options})
    engine = PerfEngine(config, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=100))
    where: list[object] = ["", -1]
    seen: list[tuple[str, str, int]] = []
    cuda.start.side_effect = lambda: seen.append(("start", *where))
    cuda.stop.side_effect = lambda: seen.append(("stop", *where))
    for step in range(12):
        where[:] = ["batch_start", step]
        engine.batch_start(step)
        where[:] = ["batch_end", step]
        engine.batch_end(stepped=True)
    where[:] = ["close", -1]
    engine.close()
    return seen


def test_engine_captures_the_profiler_window(tmp_path: Path, cuda: mock.MagicMock) -> None:
    seen = _engine_capture_steps(tmp_path, cuda, schedule={"skip_first": 3, "wait": 0, "warmup": 1, "active": 2})
    # recorded steps 4-5: the capture starts as step 4 begins (its first activity: here its batch; with a timed loader,
    # its fetch) and stops when step 5's optimizer step ends; the warm-up step 3 stays out
    assert seen == [("start", "batch_start", 4), ("stop", "batch_end", 5)]


def test_engine_captures_nsys_steps_instead_of_the_window(tmp_path: Path, cuda: mock.MagicMock) -> None:
    seen = _engine_capture_steps(tmp_path, cuda, nsys_steps=[6, 8],
                                 schedule={"skip_first": 1, "wait": 0, "warmup": 0, "active": 2})
    assert seen == [("start", "batch_start", 6), ("stop", "batch_end", 8)]


def test_engine_capture_still_open_at_close_is_stopped(tmp_path: Path, cuda: mock.MagicMock) -> None:
    seen = _engine_capture_steps(tmp_path, cuda, nsys_steps=[10, 20], schedule={"skip_first": 100})
    assert seen == [("start", "batch_start", 10), ("stop", "close", -1)]

"""The torch profiler exists only inside windows, and stands aside for a user's own profiler (real sessions)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.exceptions import InstrumentUnavailableWarning

SCHEDULE = {"skip_first": 2, "wait": 3, "warmup": 1, "active": 2, "repeat": 3}  # warm-up 5, 11, 17; records 6-7...
RECORDED = {6, 7, 12, 13, 18, 19}
WARMUP = {5, 11, 17}
STEPS = 30


def make_engine(tmp_path: Path, schedule: dict[str, int]) -> PerfEngine:
    config = PerfConfig.from_dict({"schedule": schedule, "summary": False, "degradation_threshold": 1e6})
    return PerfEngine(config, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=10))


class SpyProfile(torch.profiler.profile):
    """The real ``torch.profiler.profile``, recording when it is built, prepared, started and stopped."""

    calls: list[tuple[str, int]] = []
    alive: weakref.WeakSet[Any] = weakref.WeakSet()
    now = -1  # the step the driver is in

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        SpyProfile.calls.append(("create", SpyProfile.now))
        SpyProfile.alive.add(self)

    def prepare_trace(self) -> None:
        SpyProfile.calls.append(("prepare", SpyProfile.now))
        super().prepare_trace()

    def start_trace(self) -> None:
        SpyProfile.calls.append(("start", SpyProfile.now))
        super().start_trace()

    def stop_trace(self) -> None:
        SpyProfile.calls.append(("stop", SpyProfile.now))
        super().stop_trace()


def test_no_profiler_outside_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.profiler, "profile", SpyProfile)
    SpyProfile.calls = []
    engine = make_engine(tmp_path, SCHEDULE)
    x = torch.randn(8, 8, requires_grad=True)
    for step in range(STEPS):
        SpyProfile.now = step
        engine.batch_start(step)
        assert torch.autograd.profiler._is_profiler_enabled is (step in RECORDED), step
        (x @ x).sum().backward()
        engine.batch_end(stepped=True)  # ends `step`'s work; `step + 1` begins at its first activity, not here
        gc.collect()
        window_goes_on = step in WARMUP or (step in RECORDED and step + 1 in RECORDED)
        assert torch.autograd.profiler._is_profiler_enabled is (step in RECORDED and step + 1 in RECORDED), step
        assert len(SpyProfile.alive) == window_goes_on, f"profiler objects alive after step {step}"
    engine.close()
    # built and warmed up as the warm-up step begins, recording from the first active step, stopped when the last
    # active step's optimizer step ends; nothing else, ever
    expected = [(kind, at) for first in (5, 11, 17)
                for kind, at in (("create", first), ("prepare", first), ("start", first + 1), ("stop", first + 2))]
    assert SpyProfile.calls == expected
    assert [p.parent.name for p in engine.exported] == ["window-000006-000007", "window-000012-000013",
                                                         "window-000018-000019"]


def test_foreign_profiler_makes_it_stand_aside(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, {"skip_first": 2, "wait": 0, "warmup": 1, "active": 2, "repeat": 2})
    x = torch.randn(8, 8, requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, \
            pytest.warns(InstrumentUnavailableWarning, match="another torch.profiler.*stands aside") as seen:
        for step in range(10):
            engine.batch_start(step)
            (x @ x).sum().backward()
            engine.batch_end(stepped=True)
        engine.close()
    assert len([w for w in seen if issubclass(w.category, InstrumentUnavailableWarning)]) == 1
    assert engine.exported == [] and not list(tmp_path.rglob("*.gz"))
    names = [e.name for e in prof.events()]
    assert names.count("aten::mm") >= 10  # the user's profiler saw every step
    assert not [n for n in names if n.startswith(("ProfilerStep#", "perf_callbacks."))]  # and nothing of ours

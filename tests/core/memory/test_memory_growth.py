"""The memory growth detector on fed readings, and its wiring in the engine (read at logged steps' start only)."""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.memory.growth import CONFIRM_STEPS, GrowthDetector
from perf_callbacks.exceptions import MemoryGrowthWarning
from tests.core.engine_helpers import run_steps

MB = 2**20
GB = 2**30
EVERY = 10  # steps between readings, as a logging interval would


def feed(d: GrowthDetector, held: list[float]) -> list[tuple[int, float]]:
    """Readings every ``EVERY`` steps; returns ``[(step, rate)]`` of each growth found."""
    found = [(i * EVERY + EVERY - 1, d.check(i * EVERY + EVERY - 1, int(h))) for i, h in enumerate(held)]
    return [(step, g.rate) for step, g in found if g is not None]


def noisy(n: int, base: float, noise: float, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [base + rng.gauss(0, noise) for _ in range(n)]


def test_a_steady_leak_fires_once_with_its_rate_after_the_warm_up_and_enough_intervals() -> None:
    d = GrowthDetector(total_bytes=80 * GB)
    held = [2 * GB, 2.5 * GB] + [3 * GB + 2 * MB * EVERY * i for i in range(40)]  # 2 warm-up readings lift it
    found = feed(d, held)
    # 2 skipped, 8 intervals after them to see it, CONFIRM_STEPS more to see it go on: once
    assert found == [((2 + 8) * EVERY + EVERY - 1 + CONFIRM_STEPS, 2 * MB)]
    growth = d.check(10_000, 80 * GB)
    assert growth is None and d.fired


def test_a_leak_within_rss_noise_is_measured_within_10_percent() -> None:
    d = GrowthDetector(total_bytes=64 * GB)
    noise = noisy(40, 0, 3 * MB)  # up to ~9 MB of noise against 20 MB a reading
    found = feed(d, [400 * MB + 2 * MB * EVERY * i + n for i, n in enumerate(noise)])
    assert len(found) == 1 and abs(found[0][1] - 2 * MB) / (2 * MB) < 0.10


@pytest.mark.parametrize("seed", range(20))
def test_flat_memory_with_noise_is_silent(seed: int) -> None:
    assert feed(GrowthDetector(total_bytes=64 * GB), noisy(200, 400 * MB, 3 * MB, seed)) == []


def test_one_jump_is_no_trend() -> None:
    """A profiling window or a cache built once lifts the memory once, and for good: no growth."""
    held = [400 * MB] * 12 + [600 * MB] * 30
    assert feed(GrowthDetector(total_bytes=64 * GB), held) == []


def test_a_few_jumps_over_a_slow_creep_are_silent_when_the_creep_would_never_fill_memory() -> None:
    """20 kB a step (a Python-side creep): at that rate 64 GB last millions of steps; windows lift it 150 MB twice."""
    held = [400 * MB + 20_000 * EVERY * i + (150 * MB if i >= 15 else 0) + (150 * MB if i >= 30 else 0)
            for i in range(100)]
    assert feed(GrowthDetector(total_bytes=64 * GB), held) == []
    assert feed(GrowthDetector(total_bytes=64 * GB, horizon_steps=10**9), held) != []  # the horizon says no


def test_a_saw_tooth_that_rises_in_most_intervals_but_never_climbs_is_not_even_seen() -> None:
    """A cache that fills 20 MB a reading four times, then is cleared: 80% of the rises are 2 MB a step (their median,
    their spread 0), yet the memory stays where it was. The levels (first quarter against the last) say so: nothing is
    seen, so nothing waits for confirmation while a real leak could start."""
    d = GrowthDetector(total_bytes=64 * GB)
    held = [400 * MB + 20 * MB * (i % 5) for i in range(60)]
    for i, h in enumerate(held):
        assert d.check(i * EVERY + EVERY - 1, int(h)) is None
        assert d.seen_growth is None, i


def test_a_growth_below_the_size_that_matters_is_silent() -> None:
    """Rising every interval, but by 1% of the memory held over 40 intervals: below ``min_fraction``."""
    held = [10 * GB + i * 2 * MB for i in range(40)]
    assert feed(GrowthDetector(total_bytes=11 * GB, min_fraction=0.01), held) == []


def test_a_leak_that_starts_late_is_found_from_the_recent_intervals() -> None:
    held = [400 * MB] * 40 + [400 * MB + 2 * MB * EVERY * i for i in range(1, 60)]
    found = feed(GrowthDetector(total_bytes=64 * GB), held)
    assert len(found) == 1 and found[0][1] == 2 * MB
    assert found[0][0] < (40 + 50) * EVERY  # from the recent intervals: all 80+ would need 120 rising ones


def cache_then_flat(every: int, fill: int = 150, steps: int = 1500, size: float = 300 * MB, seed: int = 0) -> list:
    """Readings every ``every`` steps of a cache that grows ``size`` over ``fill`` steps, then stays (RSS noise)."""
    rng = random.Random(seed)
    return [(s, int(400 * MB + size * min(s, fill) / fill + rng.gauss(0, MB))) for s in range(every - 1, steps, every)]


@pytest.mark.parametrize("every", [1, 2, 4, 5, 10, 50])
def test_a_bounded_cache_that_fills_for_150_steps_then_levels_off_is_silent(every: int) -> None:
    d = GrowthDetector(total_bytes=64 * GB)
    assert [s for s, held in cache_then_flat(every) if d.check(s, held) is not None] == []
    assert d.seen_growth is None  # the level-off cleared it: later windows get no growth


@pytest.mark.parametrize("every", [1, 2, 4, 10])
def test_the_same_growth_going_on_is_a_leak(every: int) -> None:
    d = GrowthDetector(total_bytes=64 * GB)
    found = [(s, g) for s, held in cache_then_flat(every, fill=10**6, size=300 * MB * 10**6 / 150)
             if (g := d.check(s, held)) is not None]
    assert len(found) == 1 and found[0][1].rate == pytest.approx(2 * MB, rel=0.05)
    assert found[0][0] <= 5 + 8 * every + 2 * every + CONFIRM_STEPS + every  # seen after 8 intervals, told 200 on


@pytest.mark.parametrize(("every", "change"), [(2, 120), (4, 160), (10, 150), (10, 240)])
def test_a_growth_that_slowed_before_it_was_told_is_told_at_its_current_rate(every: int, change: int) -> None:
    """2 MB a step, then 0.4 from step ``change`` (a leak partly fixed): told once, at 0.4 MB a step."""
    d = GrowthDetector(total_bytes=64 * GB)
    held, found = 2 * GB, []
    for step in range(every, 3000, every):
        held += int((2 * MB if step < change else 0.4 * MB) * every)
        if (g := d.check(step, held)) is not None:
            found.append(g)
    assert len(found) == 1 and abs(found[0].rate - 0.4 * MB) / (0.4 * MB) < 0.05, [g.rate / MB for g in found]


def test_the_warm_up_readings_are_left_out() -> None:
    """Optimizer state and lazy buffers appear in the first steps: they are no growth."""
    held = [100 * MB, 300 * MB, 500 * MB] + [500 * MB] * 30
    assert feed(GrowthDetector(total_bytes=64 * GB, warmup=3), held) == []
    rising = [100 * MB, 300 * MB] + [500 * MB + 200 * MB * i for i in range(30)]
    assert feed(GrowthDetector(total_bytes=64 * GB, warmup=0, min_intervals=2), rising) != []  # else it would


def test_many_readings_are_thinned_and_the_rate_holds() -> None:
    d = GrowthDetector(total_bytes=64 * GB, min_fraction=0.5, max_points=16)
    held = [20 * GB + MB * EVERY * i for i in range(3000)]  # 1 MiB a step: 50% of 20 GiB takes 10,240 steps
    found = feed(d, held)
    # seen once it is 50% of 20 GiB, then it must go on about as long again
    assert len(d.points) <= 17 and found == [(found[0][0], MB)] and 10_240 * 1.5 <= found[0][0] < 2 * 10_240 * 1.2


# ---- the engine ------------------------------------------------------------------------------------------------------
def engine(tmp_path: Path, logged: list, **options: object) -> PerfEngine:
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 1000, "wait": 0, "warmup": 0, "active": 1},
                                "summary": False, **options})
    ctx = RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=5,
                     log_metrics=lambda m, s: logged.append((s, m)))
    return PerfEngine(cfg, ctx)


def test_the_engine_reads_the_held_memory_at_the_start_of_logged_steps_only(tmp_path: Path) -> None:
    logged: list = []
    e = engine(tmp_path, logged)
    assert e.growth is not None
    reads: list[int] = []
    real = e.growth.read
    with mock.patch.object(e.growth, "read", side_effect=lambda step: (reads.append(step), real(step))):
        run_steps(e, 21)
    e.close()
    assert reads == [4, 9, 14, 19]  # the start of each step that ends a logging interval
    assert [s for s, _ in logged] == [5, 10, 15, 20]
    assert all(m["perf/memory/held_mb"] > 1 and m["perf/memory/peak_rss_mb"] >= m["perf/memory/held_mb"] * 0.5
               for _, m in logged)


@pytest.mark.parametrize("profile_memory", [False, True])
def test_the_engine_warns_once_with_the_growth_and_passes_it_to_the_next_window(tmp_path: Path,
                                                                              profile_memory: bool) -> None:
    logged: list = []
    e = engine(tmp_path, logged, profile_memory=profile_memory)
    held = iter(range(400 * MB, 100 * GB, 10 * MB))  # 10 MB per reading: 2 MB a step
    with mock.patch("perf_callbacks.core.memory.growth.host_rss_bytes", side_effect=lambda: next(held)), \
            warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run_steps(e, 280)
    e.close()
    said = [str(w.message) for w in seen if issubclass(w.category, MemoryGrowthWarning)]
    assert len(said) == 1 and "grows by 2.10 MB per step" in said[0]  # 2 MiB
    assert "small tensors kept across steps (even detached) pin the C allocator's heap" in said[0]  # on CPU only
    # the op is named only in windows that record allocations: the warning opens one, else says how to get one
    if profile_memory:
        assert said[0].endswith("; steps 255-257 are profiled now to name the operator that allocates what is kept")
        (window,) = (tmp_path / "run").glob("window-*")
        assert window.name == "window-000255-000257"
    else:
        assert said[0].endswith("; windows record no allocations (profile_memory=False): rerun with "
                                "profile_memory=True and a window opened at this warning names the operator that "
                                "allocates what is kept")
        assert list((tmp_path / "run").glob("window-*")) == []
    assert e.windows.growth_meta is not None
    assert e.windows.growth_meta() == {"bytes_per_step": 2 * MB, "since_step": 14, "until_step": 54 + CONFIRM_STEPS}


@pytest.mark.parametrize(("schedule", "said"), [
    ({"skip_first": 300, "wait": 0, "warmup": 1, "active": 3}, "the profiling window from step 301 names the operator"),
    ({"skip_first": 250, "wait": 0, "warmup": 1, "active": 10},  # recording at the warning: its trace began without
     "no profiling window is left in this run to name the operator that allocates what is kept (captures spent or one "
     "recording): `perf-callbacks capture RUN_DIR` opens a window that names it"),  # the growth: it looks for nothing
    ({"skip_first": 10, "wait": 0, "warmup": 1, "active": 3},
     "no profiling window is left in this run to name the operator that allocates what is kept (captures spent or one "
     "recording): `perf-callbacks capture RUN_DIR` opens a window that names it"),
])
def test_with_the_capture_budget_spent_the_warning_says_which_window_names_the_operator(
        tmp_path: Path, schedule: dict[str, int], said: str) -> None:
    """No capture left this hour: the next scheduled window if any (its profiler starts after the warning), else how
    to ask for one; never a window that will not come."""
    e = engine(tmp_path, [], profile_memory=True, capture_max_per_hour=0, schedule=schedule)
    held = iter(range(400 * MB, 100 * GB, 10 * MB))
    with mock.patch("perf_callbacks.core.memory.growth.host_rss_bytes", side_effect=lambda: next(held)), \
            warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run_steps(e, 260)
    e.close()
    (message,) = [str(w.message) for w in seen if issubclass(w.category, MemoryGrowthWarning)]
    assert message.endswith(said if said.endswith("names it") else said + " that allocates what is kept"), message


def test_a_growth_told_that_levels_off_later_is_no_longer_passed_to_windows(tmp_path: Path) -> None:
    e = engine(tmp_path, [])
    readings = [400 * MB + 10 * MB * min(i, 60) for i in range(120)]  # 2 MiB a step for 300 steps, then flat
    held = iter(readings)
    with mock.patch("perf_callbacks.core.memory.growth.host_rss_bytes", side_effect=lambda: next(held)), \
            pytest.warns(MemoryGrowthWarning, match="grows by 2.10 MB per step") as rec:
        run_steps(e, 5 * 61)  # the readings at steps 4, 9, ... 299: still growing, told at 254
        assert e.windows.growth_meta is not None and e.windows.growth_meta() is not None
        run_steps(e, 5 * 58, start=5 * 61)  # flat from step 304 on: 200 steps later the growth is over
    e.close()
    assert len(rec) == 1
    assert e.windows.growth_meta() is None


def test_a_growth_told_that_slows_down_later_is_passed_to_windows_at_its_new_rate(tmp_path: Path) -> None:
    e = engine(tmp_path, [])
    readings = [400 * MB + 10 * MB * min(i, 60) + 2 * MB * max(0, i - 60) for i in range(120)]  # 2 MiB, then 0.4
    held = iter(readings)
    with mock.patch("perf_callbacks.core.memory.growth.host_rss_bytes", side_effect=lambda: next(held)), \
            pytest.warns(MemoryGrowthWarning, match="grows by 2.10 MB per step") as rec:
        run_steps(e, 5 * 61)  # told at step 254, at 2 MiB a step
        run_steps(e, 5 * 58, start=5 * 61)  # 0.4 MiB a step from step 304 on
    e.close()
    assert len(rec) == 1
    meta = e.windows.growth_meta()
    assert meta is not None and abs(meta["bytes_per_step"] - 0.4 * MB) / (0.4 * MB) < 0.05, meta


def test_a_failed_read_turns_the_check_off_with_one_warning_and_training_goes_on(tmp_path: Path) -> None:
    e = engine(tmp_path, [])
    with mock.patch("perf_callbacks.core.memory.growth.host_rss_bytes", side_effect=OSError("gone")), \
            pytest.warns(Warning, match="memory growth check is off"):
        run_steps(e, 12)
    e.close()
    assert e.growth is None and e.steps_run == 12


def test_memory_off_reads_nothing(tmp_path: Path) -> None:
    e = engine(tmp_path, [], memory=False)
    assert e.growth is None and e.windows.growth_meta is None
    run_steps(e, 12)
    e.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_allocated_bytes_give_the_leak_exactly(tmp_path: Path) -> None:
    """2 MiB kept on the device every step: the caching allocator's count grows by exactly that (no RSS noise)."""
    device = torch.device("cuda", torch.cuda.current_device())
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 1000, "wait": 0, "warmup": 0, "active": 1},
                                "summary": False, "nvml": False})
    logged: list = []
    e = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=5, device=device,
                                   log_metrics=lambda m, s: logged.append((s, m))))
    kept = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for step in range(80):
            e.batch_start(step)
            kept.append(torch.ones(512 * 1024, device=device))  # 2 MiB
            e.batch_end(stepped=True, samples=8)
    e.close()
    said = [str(w.message) for w in seen if issubclass(w.category, MemoryGrowthWarning)]
    assert len(said) == 1 and "allocated device memory" in said[0] and "the device is full in about" in said[0]
    assert "C allocator" not in said[0]
    assert e.growth is not None and e.growth.growth is not None and e.growth.growth.rate == 2 * MB
    assert "perf/memory/held_mb" in logged[-1][1] and "perf/memory/peak_rss_mb" not in logged[-1][1]


def test_the_interval_peak_rss_is_reset_in_this_process_only_and_asks_no_pid(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``clear_refs`` is opened per process (a forked child resets its own peak, never its parent's), and the id that
    says which process is learnt at fork, not asked for at each logging step."""
    import os

    from perf_callbacks.core.memory import growth

    if growth._interval_peak_rss() is None:  # not Linux 4.0+: nothing to reset
        return
    assert growth._clear_refs[0] == os.getpid()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: which process's clear_refs it now holds
        growth._interval_peak_rss()
        os.write(write_fd, str(growth._clear_refs[0] == os.getpid()).encode())
        os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    assert os.read(read_fd, 10) == b"True"
    os.close(read_fd)
    monkeypatch.setattr(os, "getpid", lambda: (_ for _ in ()).throw(AssertionError("getpid called")))
    assert growth._interval_peak_rss() is not None

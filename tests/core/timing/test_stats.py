"""Step statistics, the degradation detector and the early data-wait check: pure arithmetic, checked exactly."""

from __future__ import annotations

import pytest

from perf_callbacks.core.timing.stats import (
    MIN_ACTIONABLE_WAIT_S,
    DataWaitCheck,
    DegradationDetector,
    Slowdown,
    StepStats,
)


def test_step_stats_median_wait_share_and_throughput() -> None:
    stats = StepStats()
    assert stats.compute() == {}
    for step_time, wait, samples in ((0.2, 0.01, 8), (0.5, 0.02, None), (0.1, 0.03, 0)):
        stats.update(step_time=step_time, data_wait=wait, samples=samples)
    m = stats.compute()
    assert set(m) == {"train/step_time_ms", "train/data_wait_fraction", "train/samples_per_sec"}
    assert m["train/step_time_ms"] == pytest.approx(200.0)  # the median, not the mean (267) or the last (100)
    assert m["train/data_wait_fraction"] == pytest.approx(0.06 / 0.8)
    assert m["train/samples_per_sec"] == pytest.approx(8 / 0.8)
    stats.update(step_time=1.0, data_wait=0.0, samples=4)
    assert stats.compute()["train/step_time_ms"] == pytest.approx(350.0)  # median of 0.1, 0.2, 0.5, 1.0


def test_step_stats_reset_starts_a_new_interval() -> None:
    stats = StepStats()
    stats.update(step_time=0.5, data_wait=0.25, samples=10)
    stats.reset()
    assert (stats.step_times, stats.data_wait, stats.samples) == ([], 0.0, 0)
    assert stats.compute() == {}
    stats.update(step_time=0.5, data_wait=0.0, samples=10)
    assert stats.compute() == {"train/step_time_ms": 500.0, "train/data_wait_fraction": 0.0,
                               "train/samples_per_sec": 20.0}


def test_step_stats_keep_the_intervals_steps_and_the_runs_units() -> None:
    """The interval's first and last step start again at each reset; the units of the first step, and whether they
    varied since, are the run's (the slowdown alarm reads them: per step while they hold, per sample once varied)."""
    stats = StepStats()
    for step in (7, 8, 9):
        stats.update(step_time=0.4, data_wait=0.0, samples=None, micro_batches=2, step=step)
    assert (stats.first_step, stats.last_step, stats.units, stats.varied) == (7, 9, ("micro-batch", 2), False)
    assert stats.unit_times == [0.2, 0.2, 0.2]  # per micro-batch
    stats.reset()
    assert (stats.first_step, stats.last_step, stats.units) == (None, None, ("micro-batch", 2))
    stats.update(step_time=0.4, data_wait=0.0, samples=None, micro_batches=2)  # no step number: none kept
    assert (stats.first_step, stats.last_step, stats.varied) == (None, None, False)
    stats.update(step_time=0.4, data_wait=0.0, samples=16, micro_batches=2, step=10)
    assert (stats.first_step, stats.last_step, stats.varied) == (10, 10, True)
    assert stats.unit_times[-1] == pytest.approx(0.025)  # per sample once samples are known
    stats.reset()
    assert stats.varied  # for the rest of the run


def test_step_stats_zero_time_and_no_samples() -> None:
    stats = StepStats()
    stats.update(step_time=0.0, data_wait=0.0, samples=None)
    assert stats.compute() == {"train/step_time_ms": 0.0, "train/data_wait_fraction": 0.0}
    stats.update(step_time=0.0, data_wait=0.0, samples=5)
    assert "train/samples_per_sec" not in stats.compute()  # samples but no time: no rate
    only_time = StepStats()
    only_time.update(step_time=0.5, data_wait=0.0, samples=None)
    assert "train/samples_per_sec" not in only_time.compute()


def _feed(d: DegradationDetector, medians: list[float], first_step: int = 10) -> list[Slowdown | None]:
    return [d.check(m, first_step + 10 * i) for i, m in enumerate(medians)]


def test_baseline_after_warmup_and_its_noise() -> None:
    d = DegradationDetector(0.2, warmup_intervals=2, baseline_intervals=3)
    _feed(d, [9.0, 9.0, 1.0, 1.1])
    assert d.baseline is None and d.noise == 0.0  # two of three baseline intervals so far
    _feed(d, [0.9], first_step=50)
    assert d.baseline == pytest.approx(1.0)  # warm-up intervals (9.0) are not part of it
    assert d.noise == pytest.approx(1.4826 * 0.1)  # robust spread: 1.4826 x the median absolute deviation (0.1)
    assert d._base_steps == (30, 50)


def test_slow_means_above_threshold_and_three_times_the_noise() -> None:
    quiet = DegradationDetector(0.25, warmup_intervals=0, baseline_intervals=3, persist=1)
    _feed(quiet, [2.0, 2.0, 2.0])
    assert quiet.check(2.5, 100) is None  # exactly 25% above: not slow
    assert quiet.check(2.52, 110) == Slowdown(1.26, 2.0, 2.52, 110, 110, (10, 30), 1)

    noisy = DegradationDetector(0.2, warmup_intervals=0, baseline_intervals=3, persist=1)
    _feed(noisy, [1.0, 1.1, 0.9])  # noise 14.8%: slow needs > 44.5%
    assert noisy.check(1.39, 100) is None
    assert noisy.check(1.45, 110) is not None


def test_fires_once_after_persist_slow_intervals_in_a_row() -> None:
    d = DegradationDetector(0.2, warmup_intervals=1, baseline_intervals=3, persist=3)
    assert _feed(d, [5.0, 2.0, 2.0, 2.0]) == [None] * 4
    assert d.check(3.0, 100) is None
    assert d.check(3.0, 110) is None
    assert d.check(2.0, 120) is None  # back to normal: the streak restarts
    assert d.check(3.0, 130) is None
    assert d.check(4.0, 140) is None
    found = d.check(3.2, 150)
    assert found == Slowdown(ratio=1.6, baseline=2.0, median=3.2, since_step=130, until_step=150,
                             baseline_steps=(20, 40), intervals=3)
    assert d.fired
    assert d.check(10.0, 160) is None  # once


def test_a_slowdown_must_also_last_min_seconds() -> None:
    d = DegradationDetector(0.2, warmup_intervals=0, baseline_intervals=3, persist=3, min_seconds=3.0)
    _feed(d, [2.0, 2.0, 2.0])
    # A hiccup across three short intervals (0.1 s each) of a fast loop: slow, in a row, but 0.3 s in all.
    assert [d.check(3.0, step, seconds=0.1) for step in (100, 110, 120)] == [None] * 3
    assert d.check(2.0, 130, seconds=0.1) is None  # over
    streak = [d.check(3.0, 140 + 10 * i, seconds=1.0) for i in range(4)]
    assert streak[:2] == [None, None]  # three slow intervals are not yet 3 s
    found = streak[2]
    assert found is not None and (found.intervals, found.seconds, found.since_step) == (3, 3.0, 140)
    assert streak[3] is None and d.fired


def test_a_zero_baseline_never_divides_by_zero() -> None:
    d = DegradationDetector(0.2, warmup_intervals=0, baseline_intervals=1, persist=1)
    assert d.check(0.0, 1) is None
    assert d.baseline == 0.0 and d.noise == 0.0
    assert d.check(5.0, 2) is None



def _with_own(owns: list[float | None], threshold: float = 0.2) -> DegradationDetector:
    """A detector whose baseline is three 2.0 intervals (no noise), each of the own time given; slow at once."""
    d = DegradationDetector(threshold, warmup_intervals=0, baseline_intervals=3, persist=1)
    assert [d.check(2.0, 10 * i, own=own) for i, own in enumerate(owns, 1)] == [None] * 3
    return d


def test_a_slow_step_time_is_a_slowdown_only_when_the_own_time_is_slow_by_the_same_rule() -> None:
    # Own baseline 2.0 from 1.0, 2.0, 3.0: noise 1.4826 x 1.0 / 2.0, so slow needs own/2 - 1 > 3 x 0.7413 (> 6.4478).
    d = _with_own([1.0, 2.0, 3.0])
    assert d.own_baseline == 2.0
    assert d.check(10.0, 100, own=6.4) is None  # 5x the step time, but the run's own time is within its noise
    assert d.check(10.0, 110, own=6.5) == Slowdown(5.0, 2.0, 10.0, 110, 110, (10, 30), 1)
    # Without noise the threshold decides, strictly: exactly 25% above is not slow.
    quiet = _with_own([1.0, 1.0, 1.0], threshold=0.25)
    assert quiet.check(10.0, 100, own=1.25) is None
    assert quiet.check(10.0, 110, own=1.3) is not None


def test_an_unknown_own_time_leaves_the_step_time_to_decide() -> None:
    d = _with_own([1.0, 1.0, 1.0])
    assert d.check(10.0, 100, own=None) is not None  # this interval's own time unknown
    partial = _with_own([1.0, None, 1.0])  # one baseline interval's own time unknown: no own baseline
    assert partial.own_baseline is None
    assert partial.check(10.0, 100, own=1.0) is not None
    early = DegradationDetector(0.2, warmup_intervals=0, baseline_intervals=3)
    early.check(2.0, 10, own=1.0)
    assert early.own_baseline is None  # before the baseline is complete

def test_default_detector_parameters() -> None:
    d = DegradationDetector(0.3)
    assert (d.threshold, d.warmup, d.baseline_intervals, d.persist, d.min_seconds, d.fired) == (0.3, 1, 5, 3, 0.0, False)


def test_a_step_of_unknown_samples_is_one_micro_batch_unless_told() -> None:
    stats = StepStats()
    stats.update(0.2, 0.0, None)
    stats.update(0.2, 0.0, None, micro_batches=4)
    stats.update(0.2, 0.0, 8, micro_batches=4)
    assert stats.unit_times == [0.2, 0.05, 0.025]  # per micro-batch, per micro-batch, per sample


def test_data_wait_check_reports_a_high_share_once() -> None:
    check = DataWaitCheck(steps=3, threshold=0.2)
    assert check.update(6, step_time=5.0, data_wait=0.0) is None  # the warm-up step is not measured
    assert check.first_step is None and check.count == 0
    assert check.update(7, step_time=0.1, data_wait=0.05) is None
    assert check.update(8, step_time=0.1, data_wait=0.0) is None
    assert not check.done and check.first_step == 7
    assert check.update(9, step_time=0.2, data_wait=0.05) == pytest.approx(0.1 / 0.4)
    assert check.done and check.count == 3
    assert check.update(10, step_time=0.1, data_wait=0.1) is None


def test_data_wait_check_threshold_is_strict_and_tiny_waits_are_not_actionable() -> None:
    at_threshold = DataWaitCheck(steps=2, threshold=0.5)
    shares = [at_threshold.update(step, step_time=0.2, data_wait=0.1) for step in range(3)]
    assert at_threshold.done and at_threshold.count == 2 and shares == [None] * 3  # exactly 50%: not above, said nothing
    above = DataWaitCheck(steps=2, threshold=0.5)
    assert [above.update(step, step_time=0.2, data_wait=0.1001) for step in range(3)][-1] == pytest.approx(0.5005)

    tiny = DataWaitCheck(steps=2, threshold=0.1)  # 90% of a 1 ms step is framework work, not the loader
    tiny.update(0, step_time=0.001, data_wait=0.0009)
    tiny.update(1, step_time=0.001, data_wait=0.0009)
    assert tiny.update(2, step_time=0.001, data_wait=0.0009) is None

    one_ms = DataWaitCheck(steps=1, threshold=0.1)  # exactly 1 ms a step is actionable
    one_ms.update(0, step_time=0.004, data_wait=MIN_ACTIONABLE_WAIT_S)
    assert one_ms.update(1, step_time=0.004, data_wait=MIN_ACTIONABLE_WAIT_S) == pytest.approx(0.25)
    assert MIN_ACTIONABLE_WAIT_S == 1e-3


def test_a_fast_loader_with_a_cold_first_fetch_or_one_preempted_fetch_is_not_reported() -> None:
    # Measured on this machine: an in-memory loader's first fetch took 4.6 ms (creating the iterator, cold caches),
    # the next ones 0.1 ms, in steps of 0.4-0.5 ms. Averaged over 5 steps that was 1.1 ms a step and 17% of step
    # time, and the warning fired on a loader with nothing to fix.
    cold = DataWaitCheck(steps=5, threshold=0.1)
    waits = [0.0046, 0.0005, 0.00013, 0.0001, 0.0001, 0.0001]
    assert [cold.update(i, step_time=w + 0.0004, data_wait=w) for i, w in enumerate(waits)] == [None] * 6
    assert cold.done
    preempted = DataWaitCheck(steps=5, threshold=0.1)  # one fetch descheduled for 20 ms in the middle
    waits = [0.0001, 0.0001, 0.0001, 0.02, 0.0001, 0.0001]
    assert [preempted.update(i, step_time=w + 0.0004, data_wait=w) for i, w in enumerate(waits)] == [None] * 6
    slow = DataWaitCheck(steps=5, threshold=0.1)  # a loader that is slow at every step is still reported
    shares = [slow.update(i, step_time=0.012, data_wait=0.008) for i in range(6)]
    assert shares[:5] == [None] * 5 and shares[5] == pytest.approx(0.008 / 0.012)


def test_data_wait_check_with_no_time() -> None:
    check = DataWaitCheck(steps=1, threshold=-1.0)
    check.update(0, step_time=0.0, data_wait=0.0)
    assert check.update(1, step_time=0.0, data_wait=0.0) is None  # share 0.0, and no wait to act on
    assert check.total == 0.0 and check.done
    waited_only = DataWaitCheck(steps=1, threshold=0.5)  # all of the step was set aside: no share to report
    waited_only.update(0, step_time=0.0, data_wait=0.01)
    assert waited_only.update(1, step_time=0.0, data_wait=0.01) is None

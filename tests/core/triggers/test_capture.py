"""Captured windows in the core: where a capture may go, the budget, the anomaly bar, the signal and the file."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from perf_callbacks.analysis.windows.captured import capture_text
from perf_callbacks.config import PerfConfig, ScheduleConfig
from perf_callbacks.core.timing.stats import Slowdown
from perf_callbacks.core.triggers.captures import (
    K_MIN,
    MIN_EXCESS_S,
    AnomalyWatch,
    Capture,
    CaptureSchedule,
    SpikeLimit,
)
from perf_callbacks.core.triggers.requests import REQUEST_FILE, FileRequests, SignalRequest, local_reader, write_request
from perf_callbacks.core.triggers.schedule import Action, Schedule
from perf_callbacks.core.triggers.wait import WaitSampler
from perf_callbacks.exceptions import PerfConfigError

SCHEDULE = ScheduleConfig(skip_first=10, wait=1, warmup=1, active=3, repeat=2)  # windows 12-14 and 17-19


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def anomaly(step: int, active: int = 3) -> Capture:
    return Capture("anomaly", step, step + 1, step + active, 400.0, 100.0)


def test_a_capture_is_recorded_without_warm_up_and_named_by_its_own_steps() -> None:
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=100, active=3)))
    assert s.open(anomaly(37))
    assert [s.action(i) for i in range(37, 42)] == [Action.NONE, Action.RECORD, Action.RECORD,
                                                    Action.RECORD_AND_SAVE, Action.NONE]
    assert s.window(39) == (38, 40) and s.next_active(20) == 38 and s.next_active(41) == 101
    assert s.capture_at(40) is not None and s.capture_at(41) is None


def test_a_capture_never_overlaps_another_nor_a_scheduled_window() -> None:
    s = CaptureSchedule(Schedule(SCHEDULE))
    assert not s.open(anomaly(15))  # 16: the next scheduled window's warm-up
    assert s.plan is None
    assert s.open(anomaly(14))  # 15 alone: cut short before the warm-up at 16
    assert s.plan is not None and (s.plan.first, s.plan.last) == (15, 15)
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=100)))
    assert s.open(anomaly(37))
    assert not s.open(anomaly(39))  # inside the capture 38-40
    assert s.open(anomaly(40))  # from 41 on: after it


def test_the_budget_holds_per_hour_and_requests_are_not_counted() -> None:
    clock = FakeClock()
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=10_000)), max_per_hour=2, clock=clock)
    assert s.open(anomaly(10))
    clock.t = 1000.0
    assert s.open(anomaly(20))
    assert not s.open(anomaly(30))
    s.request("signal", "SIGUSR2")
    s.action(40)
    assert s.plan is not None and s.plan.reason == "signal" and s.plan.first == 40
    clock.t = 3599.0
    assert not s.open(anomaly(50))
    clock.t = 3600.0  # the first one is an hour old, the second is not
    assert s.open(anomaly(60))
    assert not s.open(anomaly(70))


def test_a_request_inside_a_scheduled_window_is_served_by_it() -> None:
    s = CaptureSchedule(Schedule(SCHEDULE))
    s.request("file", "abc", 2)
    assert s.action(13) is Action.RECORD  # the scheduled window's
    assert s.plan is None and not s.pending
    s.request("file", "def", 2)
    assert s.action(30) is Action.RECORD and s.window(30) == (30, 31)


def test_the_bar_is_k_times_the_median_with_k_from_the_interval_spread() -> None:
    bar = SpikeLimit()
    assert bar.limit == float("inf")
    assert bar.refresh([0.1] * 3) == float("inf")  # too few steps: unchanged
    assert bar.refresh([0.1] * 10) == pytest.approx(K_MIN * 0.1)
    noisy = [0.1, 0.12, 0.08, 0.1, 0.13, 0.07, 0.1]  # MAD 0.02: noise 0.3, k = 1 + 6 x 0.3
    assert bar.refresh(noisy) == pytest.approx((1 + 6 * 1.4826 * 0.02 / 0.1) * 0.1)
    assert bar.refresh([0.02] * 10) == pytest.approx(0.02 + MIN_EXCESS_S)  # short steps: 100 ms above the median


class FakeWait(WaitSampler):
    """The training thread's cumulative wait, as the test says: ``now`` at the step's end, ``samples`` before."""

    def __init__(self, now: float, before: float, fraction: float = 0.0) -> None:
        self.now, self.share = now, fraction
        super().__init__()
        self.close()
        self.samples.append((time.perf_counter() - 100.0, before))  # long before the step began

    def read(self) -> float | None:
        return self.now

    def fraction(self) -> float:
        return self.share


def test_a_step_long_because_it_waited_for_a_cpu_is_no_anomaly() -> None:
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
    busy = FakeWait(now=10.35, before=10.0)  # 0.35 s of the step's 0.5 s was waiting for a core: 0.15 s its own
    watch = AnomalyWatch(s, sampler=busy)
    assert watch.interval(10, [0.1] * 10, None) == pytest.approx(0.25) == watch.bar.own_limit
    watch.spiked(20, 0.5)
    assert s.plan is None
    busy.now = 10.2  # 0.3 s its own
    watch.spiked(20, 0.5)
    assert s.plan is not None and s.plan.first == 21


def test_on_a_busy_machine_a_step_must_be_slow_in_elapsed_and_in_own_time() -> None:
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
    watch = AnomalyWatch(s, sampler=FakeWait(now=1.0, before=1.0, fraction=0.75))  # steps of 0.2 s, 0.05 s own
    assert watch.interval(10, [0.2] * 10, None) == pytest.approx(0.5)  # on the elapsed time: 2.5 x 0.2 s
    assert watch.bar.own_limit == pytest.approx(0.15)  # on the own time: 0.05 + 0.1 s
    watch.spiked(20, 0.45)  # 0.45 s of its own, but not 2.5x the elapsed median
    assert s.plan is None
    watch.spiked(20, 0.6)
    assert s.plan is not None and s.plan.step == 20


def test_the_sampler_reads_the_training_threads_wait() -> None:
    sampler = WaitSampler(every_s=0.005)
    sampler.start()
    try:
        time.sleep(0.05)
        if sampler.read() is None:  # not Linux: the elapsed time is the step's own
            assert sampler.own(0.04) == 0.04
            return
        assert len(sampler.samples) >= 2
        assert 0.0 <= sampler.own(0.04) <= 0.04
        assert 0.0 <= sampler.fraction() <= 1.0
    finally:
        sampler.close()
    assert sampler.read() is None


def test_the_anomaly_watch_opens_one_window_with_its_reason() -> None:
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
    watch = AnomalyWatch(s)
    watch.spiked(5, 1.0)  # no bar yet: nothing
    assert s.plan is None
    watch.interval(10, [0.121] * 10, None)
    watch.spiked(1841, 0.412)
    assert s.plan is not None and (s.plan.first, s.plan.last) == (1842, 1844)
    assert capture_text(s.plan.meta()) == "step 1,841 took 412 ms, 3.4x the median 121 ms"


def test_the_slowdown_alarm_opens_one_window_at_the_logging_step() -> None:
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
    watch = AnomalyWatch(s)
    slow = Slowdown(1.5, 2.0, 3.0, since_step=300, until_step=449, baseline_steps=(50, 299), intervals=3, seconds=9.0)
    watch.interval(450, [0.1] * 10, slow)
    assert s.plan is not None and (s.plan.first, s.plan.last, s.plan.step) == (450, 452, 449)
    assert capture_text(s.plan.meta()) == "the slowdown alarm at step 449: the median step has been 1.50x this run's " \
        "baseline"
    watch.interval(500, [0.1] * 10, slow)  # the alarm fires once: one window
    assert s.plan.first == 450


def test_signal_chains_to_the_previous_handler_and_restores_it() -> None:
    calls: list[int] = []

    def user_handler(signum: int, frame: object) -> None:
        calls.append(signum)

    previous = signal.signal(signal.SIGUSR2, user_handler)
    try:
        s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
        req = SignalRequest("SIGUSR2", s)
        assert req.install()
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.01)  # the handler runs at the next bytecode
        assert calls == [signal.SIGUSR2] and len(s.pending) == 1
        req.close()
        assert signal.getsignal(signal.SIGUSR2) is user_handler
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.01)
        assert calls == [signal.SIGUSR2] * 2 and len(s.pending) == 1  # ours is gone
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_each_request_id_is_served_once_and_an_old_one_never(tmp_path: Path) -> None:
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
    old = write_request(tmp_path)
    files = FileRequests([local_reader(tmp_path / REQUEST_FILE)], s, every_s=0.01)
    files.start()
    try:
        time.sleep(0.1)
        assert not s.pending and old in files.served  # there before training started
        new = write_request(tmp_path, steps=2)
        deadline = time.monotonic() + 5
        while not s.pending and time.monotonic() < deadline:
            time.sleep(0.01)
        assert list(s.pending) == [("file", new, 2, None)]
        (tmp_path / REQUEST_FILE).write_text((tmp_path / REQUEST_FILE).read_text() + " ")  # touched, same id
        time.sleep(0.1)
        assert len(s.pending) == 1
    finally:
        files.close()
    assert (tmp_path / REQUEST_FILE).exists()  # left for the other ranks


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"capture_signal": "SIGNOPE"}, r"capture_signal must name a signal .*'SIGNOPE' \(no signal of this"),
        ({"capture_signal": "SIG_DFL"}, "capture_signal must name a signal .*'SIG_DFL'"),
        ({"capture_signal": "SIGKILL"}, r"capture_signal must name a signal .*'SIGKILL' \(a signal no handler can catch\)$"),
        ({"capture_signal": "SIGSTOP"}, r"capture_signal must name a signal .*'SIGSTOP' \(a signal no handler can catch\)$"),
        ({"capture_poll_s": -1}, "capture_poll_s must be a finite number >= 0, got -1"),
        ({"capture_max_per_hour": -1}, "capture_max_per_hour must be >= 0, got -1"),
        ({"capture_on_anomaly": "yes"}, "capture_on_anomaly must be bool"),
    ],
)
def test_bad_capture_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(PerfConfigError, match=message) as err:
        PerfConfig.from_dict(options)
    assert "\n" not in str(err.value)  # one line


def test_a_signal_that_cannot_be_installed_turns_off_only_the_signal(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from perf_callbacks.exceptions import InstrumentUnavailableWarning
    from tests.core.engine_helpers import make_engine

    def refuse(self: SignalRequest) -> bool:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(SignalRequest, "install", refuse)
    with pytest.warns(InstrumentUnavailableWarning, match="^perf-callbacks: capture_signal SIGUSR2 is off for this run .*OSError") as rec:
        engine = make_engine(tmp_path, capture_on_anomaly=True, capture_poll_s=0.05)
    try:
        assert len(rec) == 1
        requests = engine.captures.requests
        assert requests is not None and requests.files is not None and requests.files._thread is not None
        assert requests.files._thread.is_alive()  # the request file still works
        assert engine.captures.anomaly is not None  # and so does the anomaly rule
    finally:
        engine.close()


@pytest.mark.parametrize("every", [1, 2, 4, 5])
def test_the_anomaly_rule_fires_at_any_log_every_n_steps(tmp_path: Path, every: int) -> None:
    """300 ms steps, step 30 takes 1.5 s: the bar is set from short intervals added up, and the spike opens a window."""
    from unittest import mock

    from perf_callbacks.core.engine.engine import PerfEngine, RunContext
    from tests.core.engine_helpers import FakeClock

    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 1000}, "summary": False, "capture_on_anomaly": True,
                                "capture_signal": None, "capture_poll_s": 0, "flops": False, "memory": False})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=every))
    assert engine.captures.anomaly is not None
    engine.captures.anomaly.sampler = None  # judged on elapsed time: the fake clock's
    clock = FakeClock()
    try:
        with mock.patch("time.perf_counter", clock):
            for step in range(40):
                engine.batch_start(step)
                clock.t += 1.5 if step == 30 else 0.3
                engine.batch_end(stepped=True)
                plan = engine.windows.schedule.plan
                if plan is not None:
                    break
    finally:
        engine.close()
    assert plan is not None and plan.reason == "anomaly" and (plan.step, plan.first) == (30, 31)

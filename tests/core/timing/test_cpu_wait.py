"""The wait for a CPU: read from the kernel, and a slowdown it explains is the machine's, not the run's."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.timing.cpu_wait import SCHEDSTAT, CpuWait, ThreadWait, run_delay_s
from perf_callbacks.core.timing.monitor import StepMonitor
from perf_callbacks.core.timing.stats import DegradationDetector


def test_the_kernel_says_how_long_this_thread_waited() -> None:
    first = run_delay_s()
    if not Path(SCHEDSTAT).exists():  # not Linux: nothing to read, nothing claimed
        assert first is None
        return
    x = 0
    for i in range(200_000):
        x += i
    second = run_delay_s()
    assert first is not None and second is not None and 0.0 <= first <= second


def test_each_interval_is_the_wait_since_the_last_one_on_the_same_thread() -> None:
    readings = iter([1.0, 1.5, None, 2.0, 2.75, 3.0])
    wait = CpuWait(lambda: next(readings))  # reads 1.0
    assert wait.interval() == 0.5
    assert wait.interval() is None  # a missing reading
    assert wait.interval() is None  # the interval after it has no start
    assert wait.interval() == 0.75
    seen: list[float | None] = []
    thread = threading.Thread(target=lambda: seen.append(wait.interval()))
    thread.start()
    thread.join()
    assert seen == [None]  # another thread's counter: no difference to take


def test_the_detector_needs_the_own_time_to_be_slow_too() -> None:
    """Steps 50% longer: with the own time (less the wait for a CPU) unchanged it is the machine, not the run."""
    busy = DegradationDetector(0.2, warmup_intervals=0, baseline_intervals=3, persist=3)
    for i in range(3):
        assert busy.check(2.0, i, own=1.8) is None
    assert all(busy.check(3.0, i, own=1.8) is None for i in range(3, 10))
    assert busy.check(3.0, 10, own=2.7) is None and busy.check(3.0, 11, own=2.7) is None
    slow = busy.check(3.0, 12, own=2.7)  # three intervals whose own time is 50% above the baseline's as well
    assert slow is not None and slow.ratio == 1.5
    unknown = DegradationDetector(0.2, warmup_intervals=0, baseline_intervals=3, persist=3)
    results = [unknown.check(m, i, own=None) for i, m in enumerate([2.0] * 3 + [3.0] * 3)]
    assert results[-1] is not None  # without the wait, the step times alone decide, as before


def feed(steps: list[tuple[float, float]], every: int = 10) -> list[str]:
    """``(step seconds, of which waiting for a CPU)`` per step, 32 samples each, through a StepMonitor."""
    waited = [0.0]
    said: list[str] = []
    monitor = StepMonitor(PerfConfig(), RunContext(output_dir=Path("unused"), run_name="run", log_every_n_steps=every),
                          lambda key, category, message: said.append(message), cpu_wait=CpuWait(lambda: waited[0]))
    for i, (seconds, wait) in enumerate(steps):
        waited[0] += wait
        monitor.measured(i, seconds, 0.0, 32, False)
        if (i + 1) % every == 0:
            monitor.log_interval(i + 1, None, clean=True, loader_timed=False)
    return said


def test_steps_longer_by_their_wait_for_a_cpu_are_not_a_slowdown() -> None:
    """100 ms steps, then 40 s of 150 ms steps: the extra 50 ms is the wait for a CPU (other processes took it)."""
    assert feed([(0.1, 0.0)] * 100 + [(0.15, 0.05)] * 300) == []
    assert feed([(0.1, 0.02)] * 100 + [(0.15, 0.07)] * 300) == []  # a machine already busy that got busier
    (message,) = feed([(0.1, 0.02)] * 100 + [(0.15, 0.02)] * 300)  # the same wait: the run's own work grew
    assert message.startswith("median step time has been 50% above"), message


def test_the_kept_file_reads_what_the_kernel_says_now_and_follows_the_thread() -> None:
    read = ThreadWait()
    first = read()
    if not Path(SCHEDSTAT).exists():
        assert first is None
        return
    files = len(os.listdir("/proc/self/fd"))
    x = 0
    for i in range(200_000):
        x += i
    reference = run_delay_s()
    second = read()
    assert first is not None and second is not None and reference is not None
    assert first <= reference <= second  # the kept file, read anew: this thread's figure now
    other: list[float | None] = []
    thread = threading.Thread(target=lambda: (other.append(read()), other.append(run_delay_s())))
    thread.start()
    thread.join()
    assert other[0] is not None and other[1] is not None and other[0] <= other[1]  # the new thread's own wait
    assert len(os.listdir("/proc/self/fd")) == files  # the first thread's file closed when the second's opened
    ThreadWait()()  # opens its file, and is gone
    assert len(os.listdir("/proc/self/fd")) == files  # closed with its reader


def test_a_forked_child_reads_its_own_thread_not_the_file_it_inherited() -> None:
    """The kept-open file names the thread that opened it: a forked child must open its own, or it would read its
    parent's counters (a parent that ran 0.2 s on a CPU, a child that just started)."""
    reader = ThreadWait()
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:
        pass
    parent = reader.sched()
    assert parent is not None and parent[0] >= 0.1
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it reads, and leave without running the parent's exit handlers
        child = reader.sched()
        os.write(write_fd, repr(None if child is None else child[0]).encode())
        os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    child_ran = float(os.read(read_fd, 100))
    os.close(read_fd)
    assert child_ran < parent[0] / 2


def test_a_logging_step_reads_the_threads_counters_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The interval's CPU wait (slowdown detector) and its load (``train/cpu_contention_fraction``) come from one read of
    ``/proc/thread-self/schedstat``, and the wait is still the kernel's: the two figures agree."""
    logged: list[dict[str, float]] = []
    ctx = RunContext(output_dir=Path("/nonexistent"), run_name="run", log_every_n_steps=10,
                     log_metrics=lambda metrics, step: logged.append(metrics))
    monitor = StepMonitor(PerfConfig(), ctx, lambda *a: None)
    reads = []
    real = ThreadWait.sched
    monkeypatch.setattr(ThreadWait, "sched", lambda self: reads.append(1) or real(self))
    for interval in range(3):
        for step in range(10):
            monitor.measured(interval * 10 + step, 0.01, 0.0, 8, True)
        before = len(reads)
        monitor.log_interval(interval * 10 + 10, None, True, True)
        assert len(reads) - before == 1
    if run_delay_s() is not None:  # Linux: both figures measured, from the same counter
        assert "perf/train/cpu_contention_fraction" in logged[-1]


def test_a_read_makes_no_getpid_system_call(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A read is one ``pread``: at a logging step a system call costs several microseconds (cold kernel paths), so the
    process id that tells a forked child is learnt at fork, not asked for at each read."""
    reader = ThreadWait()
    assert reader.sched() is not None  # opened on this thread
    monkeypatch.setattr(os, "getpid", lambda: (_ for _ in ()).throw(AssertionError("getpid called")))
    assert reader.sched() is not None

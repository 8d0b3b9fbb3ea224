"""The loader decision table, row by row: fed evidence in, the advice kind, the workers and the gain out."""

from __future__ import annotations

import random

import pytest

from perf_callbacks.analysis.judge.advice import measured_fix
from perf_callbacks.analysis.judge.decide import BAND, BUSY, MAX_WORKERS, TABLE, LoaderEvidence, decide


def ev(workers: int | None, busy: float | None = None, cpu: float | None = None, cores: int | None = 2,
       step: float = 25.0, wait: float = 20.0, blocked: float | None = None, share: float = 0.8,
       fetch: float | None = None, fetch_busy: float | None = None, fetch_cpu: float | None = None) -> LoaderEvidence:
    """``fetch``: the median fetch timed in the workers (its shares ``busy``/``cpu`` unless given); None: untimed."""
    timed = fetch is not None
    return LoaderEvidence(workers, cores, step_ms=step, wait_ms=wait, own_ms=step - wait, workers_cpu=cpu,
                          workers_busy=busy, main_blocked=blocked, share=share, fetch_p50_ms=fetch,
                          fetch_cpu=(fetch_cpu if fetch_cpu is not None else cpu) if timed else None,
                          fetch_busy=(fetch_busy if fetch_busy is not None else busy) if timed else None)


# (evidence, kind, workers, gain in ms): gains from max(own work, fetch / workers), the fetch from the fed times
ROWS = [
    pytest.param(ev(None, cores=2), "not_measured", 1, None, id="unknown-setting"),
    pytest.param(ev(2, cores=4), "not_measured", 4, 25.0 - 50.0 / 4, id="not-measured-under-the-cores"),
    pytest.param(ev(2, cores=2), "not_measured", None, None, id="not-measured-at-the-cores"),
    pytest.param(ev(0, cores=1, step=91.0, wait=85.0), "one_core", None, None, id="in-process-one-core"),
    # the case: fetch 85 ms against 6 ms of step work, 2 cores: 2 workers, about -50% (not -96%)
    pytest.param(ev(0, cores=2, step=91.0, wait=85.0), "in_process", 2, 91.0 - 42.5, id="in-process"),
    pytest.param(ev(0, cores=8, step=91.0, wait=85.0), "in_process", 8, 91.0 - 85.0 / 8, id="in-process-8-cores"),
    pytest.param(ev(2, busy=0.05, cpu=0.04, blocked=0.1), "handover", None, None, id="handover-main-on-cpu"),
    # blocked while fetching, timed in the workers: a 50 ms fetch against 5 ms of step work takes 10 workers
    pytest.param(ev(2, busy=0.05, cpu=0.04, fetch=50.0), "io_wait", 10, 20.0, id="blocked-workers"),
    pytest.param(ev(2, busy=0.05, cpu=0.0, step=300.0, wait=299.0, fetch=600.0), "io_wait", MAX_WORKERS,
                 300.0 - 600.0 / MAX_WORKERS, id="blocked-capped-at-the-sane-max"),
    pytest.param(ev(2, busy=0.3, cpu=0.25, fetch=50.0), "io_wait", 8, 25.0 - 50.0 / 8,
                 id="blocked-capped-by-cpu-share"),
    pytest.param(ev(2, busy=0.05, cpu=0.04, share=0.05), "handover", None, None, id="idle-workers-small-wait"),
    # the false advice: in-memory data, workers idle on their queue 95% of the time (schedstat: "blocked"),
    # a 12% wait on a busy machine; timed, their 1 ms fetches ran on a CPU: they keep ahead, no word of storage
    pytest.param(ev(2, busy=0.05, cpu=0.04, step=80.0, wait=10.0, share=0.12, fetch=1.0, fetch_busy=1.0,
                    fetch_cpu=0.9), "handover", None, None, id="timed-workers-keep-ahead"),
    pytest.param(ev(2, busy=0.05, cpu=0.04, step=80.0, wait=10.0, share=0.12, fetch=3.0, fetch_busy=0.1,
                    fetch_cpu=0.1), "handover", None, None, id="timed-blocked-but-ahead"),
    # untimed (spawned workers): blocked and idle on the queue are one figure, so the advice names no storage
    pytest.param(ev(2, busy=0.05, cpu=0.04, cores=4), "not_measured", 4, 25.0 - 50.0 / 4, id="untimed-not-runnable"),
    pytest.param(ev(1, busy=BUSY, cpu=0.4, cores=4), "mixed", 4, 25.0 - 25.0 / 4, id="mixed-band"),
    pytest.param(ev(1, busy=0.95, cpu=0.9), "cpu_bound", 2, 25.0 - 12.5, id="cpu-bound"),
    pytest.param(ev(2, busy=0.95, cpu=0.5), "cpu_saturated", None, None, id="cpu-saturated"),
]


@pytest.mark.parametrize(("e", "kind", "workers", "gain"), ROWS)
def test_each_row_gives_its_kind_its_workers_and_its_gain(e: LoaderEvidence, kind: str, workers: int | None,
                                                          gain: float | None) -> None:
    d = decide(e)
    assert (d.kind, d.workers) == (kind, workers), d
    if gain is None:
        assert d.gain_ms is None, d
    else:
        assert d.gain_ms == pytest.approx(gain) and d.gain_fraction == pytest.approx(gain / e.step_ms), d
        assert str(workers) in measured_fix(e), measured_fix(e)


def test_every_row_of_the_table_is_tested() -> None:
    assert {row.kind for row in TABLE} == {p.values[1] for p in ROWS}


def test_blocked_workers_are_never_told_fewer_workers_nor_raised_past_the_cap() -> None:
    """The issue's flip: after 'raise num_workers to 66', the 66 workers that ran 0% were told 'fewer workers'."""
    for workers in (2, 8, MAX_WORKERS, 66):
        e = ev(workers, busy=0.0, cpu=0.0, step=300.0, wait=290.0, fetch=300.0 * workers)
        d = decide(e)
        assert d.kind == "io_wait" and (d.workers is None or workers < d.workers <= MAX_WORKERS), (workers, d)
        assert "fewer" not in measured_fix(e), measured_fix(e)


def test_noise_around_the_busy_threshold_does_not_flip_the_advice() -> None:
    """Workers runnable 45-55% of their time (noise around ``BUSY``) all get one kind and one number."""
    rng = random.Random(3)
    decisions = {(decide(ev(1, busy=BUSY + rng.uniform(-BAND, BAND) * 0.9, cpu=0.4, cores=4)).kind,
                  decide(ev(1, busy=BUSY + rng.uniform(-BAND, BAND) * 0.9, cpu=0.4, cores=4)).workers)
                 for _ in range(50)}
    assert decisions == {("mixed", 4)}


def test_five_evaluations_of_one_configurations_evidence_give_one_first_advice() -> None:
    """Five runs of one configuration: step and wait vary by 10%, the workers' load by 5 points; same advice kind."""
    rng = random.Random(11)
    kinds = set()
    for _ in range(5):
        step = 100.0 * rng.uniform(0.95, 1.05)
        e = ev(2, busy=0.1 + rng.uniform(-0.05, 0.05), cpu=0.05, cores=2, step=step, wait=step - 6.0,
               fetch=2 * step * rng.uniform(0.95, 1.05))
        kinds.add((decide(e).kind, decide(e).workers))
    assert kinds == {("io_wait", MAX_WORKERS)}, kinds


def test_workers_that_never_block_while_fetching_are_never_said_to_wait_on_storage() -> None:
    """Timed fetches runnable 60-100% of their time, or fetches not timed at all: never ``io_wait``, never storage."""
    rng = random.Random(5)
    for _ in range(300):
        step = rng.uniform(5.0, 300.0)
        wait = step * rng.uniform(0.1, 0.95)
        timed = rng.random() < 0.5
        e = ev(rng.choice([1, 2, 4, 8, 66]), busy=rng.uniform(0.0, 1.0), cpu=rng.uniform(0.0, 0.3),
               cores=rng.choice([1, 2, 4, 16]), step=step, wait=wait, share=wait / step,
               fetch=rng.uniform(0.1, 2000.0) if timed else None, fetch_busy=rng.uniform(0.6, 1.0))
        assert decide(e).kind != "io_wait", e
        assert "storage" not in measured_fix(e) and "I/O" not in measured_fix(e), (e, measured_fix(e))


def test_workers_that_barely_keep_up_are_not_said_to_keep_ahead() -> None:
    """The adapter run on a loaded machine: a 344 ms fetch over 2 workers (172 ms) against 180 ms of step work, 16% of
    the step waiting: the loader's jitter is waited for, so its blocked workers still get more of them."""
    e = ev(2, busy=0.1, cpu=0.01, step=214.0, wait=34.0, share=0.16, fetch=344.0, fetch_busy=0.1, fetch_cpu=0.01)
    assert (decide(e).kind, decide(e).workers) == ("io_wait", 3)
    ahead = ev(2, busy=0.1, cpu=0.01, step=250.0, wait=30.0, share=0.12, fetch=300.0, fetch_busy=0.1, fetch_cpu=0.01)
    assert decide(ahead).kind == "handover"  # 150 ms a batch against 220 ms of step work

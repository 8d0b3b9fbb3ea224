"""The window's measured load, read by the verdict: the training thread's wait for a CPU, and the loader's workers.

The training process records, per window (``core/timing/worker_load.py``), how long its training thread ran and waited
for a CPU, and how long the DataLoader workers ran and waited. Two things follow:

- ``cpu_contention``: the share of the window the training thread waited for a CPU, a loss of its own. Other
  processes (or too many threads of this one) held the cores; every figure of the window is stretched by it, and a
  fetch that was slow because the process was descheduled is no evidence of a slow loader
  (:mod:`perf_callbacks.analysis.judge.evidence`).
- the ``loader`` block: ``{num_workers, workers_cpu_fraction, fetch_ms_p50, fetch_timed, advice_kind,
  advice_workers, wait_split}``, and which advice fits (the decision table,
  :mod:`perf_callbacks.analysis.judge.decide`): more workers for workers blocked while fetching, none for workers
  busy on every core.

A trace without the metadata (another tool's, or a machine whose kernel does not say) gets neither: the advice is then
what the trace alone supports.

Example:
    >>> contention_loss({"wall_ms": 100.0, "run_queue_ms": 40.0, "ran_ms": 50.0, "workers": 0,
    ...                  "workers_cpu_ms": None, "workers_run_queue_ms": None})
    {'cpu_contention': 0.4}
"""

from __future__ import annotations

from statistics import median, median_low
from typing import Any

from perf_callbacks.analysis.judge.decide import LoaderEvidence, decide, fetch_ms
from perf_callbacks.analysis.results.result import RankResult, StepResult
from perf_callbacks.analysis.trace.machine import cores_per_rank

CAUSE = "cpu_contention"
BAR = 0.5
"""The share of the window the training thread must wait for a CPU before the verdict and the advice name it: when
it dominates, as long as all the rest together. A busy shared machine's ordinary wait stays under it: 18-29% was seen
on loops that mostly sleep (and need 1-10 ms of CPU a step), on two cores shared with neighbours at a load of 3-5.5,
where each wake-up waits for a core; the share itself is shown from 0.1% on."""


def contention_loss(load: dict[str, Any], device_idle: float | None = None) -> dict[str, float]:
    """``{"cpu_contention": share}`` of the window the training thread waited for a CPU; {} when not measured.

    With a device (``device_idle``: the share of the window it idled), the host's wait is a loss only as far as the
    device waited too: a host thread that runs ahead of its device loses nothing by waiting for a CPU.
    """
    if not load or load.get("run_queue_ms") is None:
        return {}
    share = thread_wait(load)
    return {CAUSE: round(share if device_idle is None else min(share, device_idle), 6)}


def thread_wait(load: dict[str, Any]) -> float:
    """The share of the window the training thread waited for a CPU (0 when not measured)."""
    if not load or load.get("run_queue_ms") is None:
        return 0.0
    return float(min(1.0, load["run_queue_ms"] / load["wall_ms"]))


def judged_contention(share: float) -> float:
    """The contention share the verdict and the advice use: 0 under ``BAR``."""
    return share if share >= BAR else 0.0


def loader_evidence(r: RankResult, share: float) -> LoaderEvidence | None:
    """What the loader advice of ``r`` rests on (``share``: its judged data-wait share); None without steps."""
    steps = [s for s in r.steps if s.time_ms > 0]
    if not steps:
        return None
    load = r.load or {}
    workers = r.machine.get("num_workers") if r.machine else None
    if workers is None and (r.data_loader or "").startswith("enumerate(DataLoader)#_SingleProcess"):
        workers = 0
    rounds = in_rounds(steps, workers)  # per round: the mean step, its mean wait
    times = [sum(s.time_ms for s in g) / len(g) for g in rounds]
    waits = [sum(s.causes_ms.get("input", 0.0) for s in g) / len(g) for g in rounds]
    return LoaderEvidence(workers, cores_per_rank(r.machine), median(times), median_low(waits),
                          median(t - w for t, w in zip(times, waits, strict=True)), *_workers(load), _blocked(load),
                          share, *(_fetches(load) if workers else (None, None, None)))


def in_rounds(steps: list[StepResult], workers: int | None) -> list[list[StepResult]]:
    """Consecutive steps in rounds of ``workers`` (at least three rounds; one step each in-process or unknown).

    Workers that start together finish together: one step of each round waits for all of them, the others find their
    batch ready, so a round, not a step, is what the loader's pace shows.
    """
    size = max(1, min(workers or 1, len(steps) // 3))
    return [steps[i:i + size] for i in range(0, len(steps), size)]


def loader_block(r: RankResult, share: float, material: bool) -> dict[str, Any] | None:
    """The ``loader`` block of ``r``: None for a trace without our machine metadata.

    ``advice_kind`` is ``none`` when the judged data wait (``share``) is not ``material``; ``advice_workers`` the
    ``num_workers`` the decision table advises (:mod:`perf_callbacks.analysis.judge.decide`), else None.
    ``wait_split`` the shares of the data wait measured on a CPU, blocked and waiting for a CPU (:func:`wait_split`).
    """
    if not r.machine:
        return None
    e = loader_evidence(r, share)
    measured = _workers(r.load or {})[0] if r.machine.get("num_workers") else None
    d = decide(e) if e is not None and material else None
    fetch = None if e is None else fetch_ms(e)
    return {"num_workers": r.machine.get("num_workers"),
            "workers_cpu_fraction": None if measured is None else round(measured, 4),
            "fetch_ms_p50": None if fetch is None else round(fetch, 3),
            "fetch_timed": e is not None and e.timed,
            "advice_kind": d.kind if d is not None else "none",
            "advice_workers": d.workers if d is not None else None,
            "wait_split": wait_split(r)}


def wait_split(r: RankResult) -> dict[str, float] | None:
    """The data wait's parts, ``{on_cpu, blocked, waiting_for_cpu}`` (shares summing to 1), from schedstat.

    With workers: the share of their fetch time the workers ran on a CPU, were blocked (I/O, a sleep) and waited for a
    CPU, timed in the workers; where not timed, of all their time (idle on their queue counted as blocked).
    In-process (``num_workers=0``): the median step's fetch (:func:`fetch_parts`). None: not measured.
    """
    load = r.load or {}
    workers = r.machine.get("num_workers") if r.machine else None
    if workers:
        _, cpu, busy = _fetches(load)
        if cpu is None or busy is None:  # not timed: all their time, idle on the queue counted as blocked
            cpu, busy = _workers(load)
        if cpu is None or busy is None:
            return None
        return _shares(cpu, 1.0 - busy, busy - cpu)
    steps = [s for s in r.steps if s.time_ms > 0]
    if not steps:
        return None
    parts = fetch_parts(load, median(s.time_ms for s in steps), median(s.causes_ms.get("input", 0.0) for s in steps),
                        r.gpu_utilization is not None)
    return None if parts is None else _shares(*parts)


def fetch_parts(load: dict[str, Any], step_ms: float, wait_ms: float,
                device: bool) -> tuple[float, float, float] | None:
    """An in-process fetch's ``(on a CPU, blocked, waiting for a CPU)`` ms, from the thread's shares of the window.

    The training thread's blocked share of the window, times the step, is put down to the fetch first where no device
    ran (a host loop blocks only in its fetches and sleeps), in proportion to the wait where one did (it blocks on the
    device too); the rest of the wait ran and waited for a CPU in the proportion the thread did. None: not measured.
    """
    blocked = _blocked(load)
    if blocked is None or wait_ms <= 0:
        return None
    fetch_blocked = min(wait_ms, blocked * (wait_ms if device else step_ms))
    runnable, rest = float(load["ran_ms"] + load["run_queue_ms"]), wait_ms - fetch_blocked
    if runnable <= 0:
        return 0.0, wait_ms, 0.0
    return rest * load["ran_ms"] / runnable, fetch_blocked, rest * load["run_queue_ms"] / runnable


def _shares(on_cpu: float, blocked: float, waiting: float) -> dict[str, float]:
    total = max(on_cpu + blocked + waiting, 1e-9)
    return {"on_cpu": round(max(on_cpu, 0.0) / total, 4), "blocked": round(max(blocked, 0.0) / total, 4),
            "waiting_for_cpu": round(max(waiting, 0.0) / total, 4)}


def _workers(load: dict[str, Any]) -> tuple[float | None, float | None]:
    """The workers' share of their time on a CPU, and on a CPU or waiting for one; None: not measured."""
    if not load or not load.get("workers") or load.get("workers_cpu_ms") is None:
        return None, None
    span = load["workers"] * load["wall_ms"]
    ran, waited = load["workers_cpu_ms"], load.get("workers_run_queue_ms") or 0.0
    return min(1.0, ran / span), min(1.0, (ran + waited) / span)


def _fetches(load: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """The workers' median fetch (ms), and the shares of their fetch time on a CPU and runnable; None: not timed."""
    if not load or not load.get("fetches") or not load.get("fetch_ms"):
        return None, None, None
    wall = load["fetch_ms"]
    return (load["fetch_ms_p50"], min(1.0, load["fetch_cpu_ms"] / wall),
            min(1.0, (load["fetch_cpu_ms"] + load["fetch_run_queue_ms"]) / wall))


def _blocked(load: dict[str, Any]) -> float | None:
    """The share of the window the training thread neither ran nor waited for a CPU (blocked: I/O, a queue, sleep)."""
    if not load or load.get("ran_ms") is None or load.get("run_queue_ms") is None:
        return None
    return max(0.0, 1.0 - float(load["ran_ms"] + load["run_queue_ms"]) / float(load["wall_ms"]))

"""The ledger of each logging interval: ``perf/ledger/*``, the shares of the interval's wall time by part.

Held by :class:`~perf_callbacks.core.engine.intervals.IntervalLog`. At each logged interval (never per step) it reads
the clock once and what the engine already holds: the interval's measured steps (their time and data wait, from
``StepStats``), the open step's time so far and the set-aside seconds by kind (``SetAside.totals``), each read as the
change since the last interval. The interval runs from the last logged interval's clock reading (the first: the first
step's start) to this one's, both at a step's optimizer step: the step that completed then has its time up to it in
the interval that ends there, and the rest of it in the next.

- ``productive``: the measured steps' time less their data wait (the framework's work between steps included, as in
  step time; unlike the run's ledger, time above the median is not split off per interval: warm-up, anomalies and
  compiling steps are in it);
- ``data_wait``: their data wait (where the fetch is timed);
- ``evaluation``, ``checkpoint``, ``compile``: the set-aside time by kind (from the first interval that held some);
- ``own``: perf-callbacks' own work (logging, export);
- ``other``: the rest: steps not measured (profiled, FLOP-counted), set-aside time of no known kind.

Each is a share of the interval's wall time (of the parts' sum where a step that straddles the interval's edge makes
it larger), so that they add up to 1.

Example:
    >>> totals = {"validation": 0.0, "checkpoint": 0.0, "compile": 0.0, "own": 0.0}
    >>> led = IntervalLedger(totals)
    >>> totals["checkpoint"] = 0.5
    >>> m = led.metrics(12.0, 10.0, step_time_s=1.0, data_wait_s=0.25, data_timed=True, open_step=(0.0, 0.0))
    >>> m["ledger/productive"], m["ledger/data_wait"], m["ledger/checkpoint"], m["ledger/other"]
    (0.375, 0.125, 0.25, 0.25)
"""

from __future__ import annotations

__all__ = ["KINDS", "IntervalLedger"]
KINDS = (("evaluation", "validation"), ("checkpoint", "checkpoint"), ("compile", "compile"))
"""The set-aside kinds logged once the run had some: (the tag's part, ``SetAside.totals``'s key)."""


class IntervalLedger:
    """The shares of each logged interval's wall time by part.

    Args:
        totals: the set-aside seconds by kind inside steps (``SetAside.totals``, which it reads, never writes).
    """

    def __init__(self, totals: dict[str, float]) -> None:
        self.totals = totals
        self._last: tuple[float, dict[str, float]] | None = None  # the last interval's clock and totals
        self._open = (0.0, 0.0)  # the time and data wait of the step open at the last interval, counted in it
        self._seen: set[str] = set()  # the set-aside kinds the run had so far (logged from then on)

    def metrics(self, now: float, first: float | None, step_time_s: float, data_wait_s: float, data_timed: bool,
                open_step: tuple[float, float] | None) -> dict[str, float]:
        """The interval ending at ``now`` as ``ledger/<part>`` shares; empty before the first step.

        Args:
            now: the engine's clock at the logging step.
            first: when the first step began, on that clock (the first interval's start; None: no step yet).
            step_time_s: the interval's measured steps' time (their data wait included, time set aside left out).
            data_wait_s: their data wait.
            data_timed: the fetch is timed (else no ``data_wait``: it is in ``productive``).
            open_step: the open step's time and data wait up to its optimizer step, not yet in ``step_time_s`` (None:
                it is, or no step is open; the run's last interval).
        """
        last, totals, before_open = self._last, dict(self.totals), self._open
        self._last, self._open = (now, totals), open_step or (0.0, 0.0)
        step_time_s += self._open[0] - before_open[0]
        data_wait_s += self._open[1] - before_open[1]
        if last is None:
            if first is None:
                return {}
            last = (first, dict.fromkeys(totals, 0.0))
        start, before = last
        seconds = {"productive": max(step_time_s - data_wait_s, 0.0) if data_timed else max(step_time_s, 0.0)}
        if data_timed:
            seconds["data_wait"] = max(data_wait_s, 0.0)
        for part, key in KINDS:
            spent = max(totals.get(key, 0.0) - before.get(key, 0.0), 0.0)
            if spent > 0:
                self._seen.add(part)
            if part in self._seen:
                seconds[part] = spent
        seconds["own"] = max(totals.get("own", 0.0) - before.get("own", 0.0), 0.0)
        known = sum(seconds.values())
        wall = max(now - start, known)
        if wall <= 0:
            return {}
        seconds["other"] = wall - known
        return {f"ledger/{part}": s / wall for part, s in seconds.items()}

"""Warnings and errors raised by perf-callbacks.

Every warning has two parents (as in tqdm) so users can filter either by ``PerfWarning`` or by the builtin category.
"""

from __future__ import annotations


class PerfWarning(Warning):
    """Base class of every warning this package emits."""


class DataLoaderWarning(PerfWarning, UserWarning):
    """A DataLoader setting or a measured data-wait share slows training down."""


class ShardingWarning(DataLoaderWarning):
    """The training data is not sharded across ranks, or is sharded twice."""


class PerformanceDegradationWarning(PerfWarning, RuntimeWarning):
    """Step time grew well above the run's own early baseline."""


class MemoryGrowthWarning(PerfWarning, RuntimeWarning):
    """The memory held at the start of a step grows step after step (a tensor kept across steps)."""


class InstrumentUnavailableWarning(PerfWarning, RuntimeWarning):
    """An instrument (profiler, NVTX, NVML, trace writer...) failed and was switched off; training goes on."""


class CompileWarning(PerfWarning, RuntimeWarning):
    """torch.compile keeps recompiling (a recompile storm), or its graphs break (see ``docs/torch-compile.md``)."""


class TraceSizeWarning(PerfWarning, RuntimeWarning):
    """A profiling window produced a trace above ``max_trace_mb``; its export was skipped."""


class SlowRankWarning(PerfWarning, RuntimeWarning):
    """One rank is persistently slower than the others between windows, in one phase; every rank waits for it."""


class PerfConfigError(ValueError):
    """Invalid configuration. Raised at construction, never from a training hook."""

"""One configuration for every entry point: Python keywords, LightningCLI YAML and a standalone YAML file.

The checks of each option's keys, types and values are in ``perf_callbacks._config_checks``.

Example:
    >>> cfg = PerfConfig.from_dict({"schedule": {"active": 2}, "record_shapes": True})
    >>> cfg.schedule.active, cfg.schedule.skip_first
    (2, 10)
    >>> PerfConfig.from_dict({"shedule": {}})
    Traceback (most recent call last):
    ...
    perf_callbacks.exceptions.PerfConfigError: unknown key 'shedule' (did you mean 'schedule'?); valid keys: ...
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perf_callbacks._config_checks import (
    ACTIVITIES,
    as_real,
    check_activities,
    check_capture,
    check_flops,
    check_int,
    check_keys,
    check_memory_history,
    check_positive,
    check_ranks,
    check_types,
    field_names,
)
from perf_callbacks.exceptions import PerfConfigError

__all__ = ["ACTIVITIES", "PerfConfig", "ScheduleConfig", "check_ranks"]


@dataclass(frozen=True)
class ScheduleConfig:
    """When the profiler records, counted in optimizer steps; same meaning as ``torch.profiler.schedule``.

    Args:
        wait: steps to idle at the start of each cycle.
        warmup: steps the profiler runs but discards (it settles its own overhead).
        active: steps recorded and exported; must be >= 1.
        repeat: number of cycles; 0 repeats until training ends.
        skip_first: steps ignored before the first cycle (compilation, cudnn autotune, allocator growth).
    """

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    skip_first: int = 10

    def __post_init__(self) -> None:
        for name in ("wait", "warmup", "repeat", "skip_first"):
            check_int(f"schedule.{name}", getattr(self, name), minimum=0)
        check_int("schedule.active", self.active, minimum=1)


@dataclass(frozen=True)
class PerfConfig:
    """Settings shared by ``GPUPerfCallback`` and ``AcceleratePerfHook``.

    Args:
        output_dir: where traces and summaries go. Default: ``<trainer log dir>/perf`` (Lightning) or
            ``<project_dir>/perf`` (Accelerate), else ``./perf``. An fsspec URL (``s3://bucket/perf``, ``gs://...``)
            stages files on local disk and uploads them in the background (see the Multi-node page).
        schedule: profiler schedule by optimizer step (``wait``, ``warmup``, ``active``, ``repeat``, ``skip_first``).
        activities: ``["cpu"]``, ``["cuda"]`` or both; default: CPU, plus CUDA when available.
        record_shapes: record operator input shapes (adds host overhead inside windows).
        profile_memory: record tensor allocations inside windows.
        with_stack: record Python stacks (large traces, large host overhead inside windows).
        with_flops: estimate FLOPs of matmul and conv operators.
        ranks: global ranks that profile and export traces; default: all ranks.
        max_trace_mb: largest uncompressed trace a window may write; a larger one is not exported, with a warning.
        nvtx: emit NVTX ranges for steps and phases (about 0.1 us per range; no-op when no tool is attached).
        nvtx_domain: NVTX domain name shown by Nsight Systems.
        nvtx_modules: inside windows only, add an NVTX range per ``nn.Module`` forward.
        module_spans: inside windows only, add a span per ``nn.Module`` forward to the torch trace (and an NVTX range
            when a tool listens), and count the FLOPs per module on the FLOP-counting step, so that the report gives
            each module's share of device time, FLOPs and parameters (``perf-callbacks report --modules DEPTH``).
        nsys_capture: call ``cudaProfilerStart``/``Stop`` around the profiling window (or ``nsys_steps``) so that
            ``nsys profile --capture-range=cudaProfilerApi`` records exactly those steps.
        nsys_steps: ``[first, last]`` optimizer steps for the Nsight capture instead of the torch.profiler window.
        log_every_n_steps: memory and timing log interval; default: the Trainer's ``log_every_n_steps`` (50 elsewhere).
        log_min_interval_s: the least time between two logged intervals, in seconds: a loop so fast that
            ``log_every_n_steps`` steps take less logs every few multiples of it instead (at most about two intervals
            a second by default, as tqdm's ``mininterval``); 0: at every ``log_every_n_steps``-th step. Multi-process
            Accelerate runs log at every one (their gather across ranks is a collective).
        memory: log allocated/reserved/peak device memory (host RSS on CPU-only runs).
        nvml: also log GPU utilization and power through NVML when ``nvidia-ml-py`` is installed.
        degradation_threshold: warn when an interval's median step time exceeds the early baseline by this fraction.
        data_wait_threshold: warn when data wait exceeds this share of step time over the first ``data_wait_steps``.
        data_wait_steps: optimizer steps measured for the data-wait check, after a first warm-up step.
        check_dataloaders: inspect DataLoaders (num_workers, pin_memory, sharding) when training starts.
        summary: analyse rank 0's trace at the end of each window and print a summary.
        verbose: print the whole summary on the console (it is always in ``summary.txt``); by default one line.
        top_k: operators shown in the summary.
        flops: measure the model FLOPs of one optimizer step with ``torch.utils.flop_counter.FlopCounterMode`` (one
            step outside every window, left out of step time), when neither ``flops_per_step`` nor a
            ``flops_per_batch`` attribute on the model gives them; false: no measurement.
        flops_per_step: model FLOPs (forward and backward) of one optimizer step on one device, all micro-batches
            included; the base of ``perf/train/tflops`` and MFU. Default: measured (see ``flops``).
        peak_tflops: the device's peak TFLOP/s for the run's compute dtype (dense); default: Lightning's table
            (``get_available_flops``) for CUDA devices it knows. Without it, MFU is not given (achieved TFLOP/s is).
        peak_tbps: the device's peak memory bandwidth in TB/s for the report's roofline table; default: NVML's
            memory clock x bus width on CUDA (with the ``[nvml]`` extra), else a table of known devices.
        memory_history: record the CUDA caching allocator's history (at most this many alloc/free events) for
            ``snapshot.pickle`` files (end of each window, and on out-of-memory); 0 turns it off. CUDA only.
        memory_history_start: optimizer step at which that recording starts; default: the first profiling window.
        storage_options: passed to fsspec for a remote ``output_dir`` (``{"client_kwargs": {"endpoint_url": ...}}``,
            credentials...); default: fsspec's back end reads them from the environment.
        hang_timeout: seconds without a completed step after which every rank writes ``hang-rank{R}/`` (stacks,
            step and phase, the Flight Recorder's last collectives); default: ``max(300, 20 x the median step)``;
            0 turns the watchdog off. Validation, checkpoint saves, compilation and your own code after a step's
            optimizer step until the next fetch get 10 times as long. The run itself is never stopped.
        capture_on_anomaly: open an extra window (``schedule.active`` steps) at the step after one that took more than
            k times the last logging interval's median (k from the run's own noise, at least 2.5) and 100 ms more, in
            its elapsed and its own time (less its wait for a CPU), or after the slowdown alarm; see Captured windows.
        capture_max_per_hour: at most this many such anomaly windows per hour on each rank.
        capture_signal: the signal that opens a window at the next step (``"SIGUSR2"``); null: no handler. The
            handler is installed from the main thread only; the previous handler is still called, and restored.
        capture_poll_s: how often a background thread looks for a ``capture`` request file in ``output_dir`` (and the
            run's folder), in seconds; 0: never (see ``perf-callbacks capture``). In a run of several ranks, every
            rank opens the request's window at one step they agree on through the run's folder.
        capture_signal_all_ranks: ``capture_signal`` sent to one rank opens the window on every rank, at one agreed
            step: the rank writes a request file into the run's folder (needs ``capture_signal`` and
            ``capture_poll_s`` > 0). Default false: the window opens on the rank that got the signal.
    """

    output_dir: str | None = None
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    activities: tuple[str, ...] | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    ranks: tuple[int, ...] | None = None
    max_trace_mb: float = 512.0
    nvtx: bool = True
    nvtx_domain: str = "perf_callbacks"
    nvtx_modules: bool = False
    module_spans: bool = False
    nsys_capture: bool = False
    nsys_steps: tuple[int, int] | None = None
    log_every_n_steps: int | None = None
    log_min_interval_s: float = 0.5
    memory: bool = True
    nvml: bool = True
    degradation_threshold: float = 0.2
    data_wait_threshold: float = 0.10
    data_wait_steps: int = 50
    check_dataloaders: bool = True
    summary: bool = True
    verbose: bool = False
    top_k: int = 5
    flops: bool = True
    flops_per_step: float | None = None
    peak_tflops: float | None = None
    peak_tbps: float | None = None
    memory_history: int = 0
    memory_history_start: int | None = None
    storage_options: dict[str, Any] | None = None
    hang_timeout: float | None = None
    capture_on_anomaly: bool = False
    capture_max_per_hour: int = 4
    capture_signal: str | None = "SIGUSR2"
    capture_poll_s: float = 2.0
    capture_signal_all_ranks: bool = False

    def __post_init__(self) -> None:
        _normalize(self)
        check_types(self)
        if self.storage_options is not None and not isinstance(self.storage_options, Mapping):
            raise PerfConfigError(f"storage_options must be a mapping of fsspec options, got {self.storage_options!r}")
        check_activities(self.activities)
        check_ranks(self.ranks)
        check_positive("max_trace_mb", self.max_trace_mb)
        check_memory_history(self.memory_history, self.memory_history_start)
        check_flops(self.flops_per_step, self.peak_tflops, self.peak_tbps)
        steps = self.nsys_steps
        if steps is not None and not (len(steps) == 2 and 0 <= steps[0] <= steps[1]):
            raise PerfConfigError(f"nsys_steps must be [first, last] with 0 <= first <= last, got {list(steps)}")
        if steps is not None and not self.nsys_capture:
            raise PerfConfigError(f"nsys_steps {list(steps)} does nothing without nsys_capture: true (the Nsight "
                                  "capture range); set nsys_capture: true, or remove nsys_steps")
        if self.log_every_n_steps is not None and self.log_every_n_steps < 1:
            raise PerfConfigError(f"log_every_n_steps must be >= 1, got {self.log_every_n_steps}")
        if not (math.isfinite(self.log_min_interval_s) and self.log_min_interval_s >= 0):
            raise PerfConfigError(f"log_min_interval_s must be a number of seconds >= 0 (0: every "
                                  f"log_every_n_steps steps), got {self.log_min_interval_s!r}")
        check_positive("degradation_threshold", self.degradation_threshold)
        check_positive("data_wait_threshold", self.data_wait_threshold, maximum=1.0)
        for name in ("data_wait_steps", "top_k"):
            if getattr(self, name) < 1:
                raise PerfConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hang_timeout is not None and not (math.isfinite(self.hang_timeout) and self.hang_timeout >= 0):
            raise PerfConfigError(f"hang_timeout must be a number of seconds >= 0 (0: off), got {self.hang_timeout!r}")
        check_capture(self.capture_max_per_hour, self.capture_poll_s, self.capture_signal,
                      self.capture_signal_all_ranks)
        if not self.nvtx_domain:
            raise PerfConfigError(f"nvtx_domain must be a non-empty string, got {self.nvtx_domain!r}")

    @classmethod
    def from_dict(cls, options: Mapping[str, Any]) -> PerfConfig:
        """Build a config from plain data (keyword arguments or parsed YAML), checking every key and type."""
        if not isinstance(options, Mapping):
            raise PerfConfigError(f"perf-callbacks config must be a mapping of options, got {type(options).__name__}")
        check_keys(options, field_names(cls), where="")
        return cls(**options)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> PerfConfig:
        """Read a standalone YAML file whose top-level keys are this config's keys.

        A file written for LightningCLI (``init_args:``) or nested under a ``perf_callbacks:`` key is accepted too.
        """
        from perf_callbacks._yaml import load_yaml

        data = load_yaml(path) or {}
        if isinstance(data, Mapping):
            data = data.get("perf_callbacks", data)
            data = data.get("init_args", data) if isinstance(data, Mapping) else data
        try:
            return cls.from_dict(data)
        except PerfConfigError as err:
            raise PerfConfigError(f"{path}: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        """Plain data, the inverse of :meth:`from_dict`."""
        return dataclasses.asdict(self)


def _normalize(cfg: PerfConfig) -> None:
    """Take what the callbacks take, as ``PerfConfig(...)`` keywords too.

    That is a mapping (or None) for ``schedule``, its keys checked, and lists for ``activities``, ``ranks`` and
    ``nsys_steps``, and a number of any numeric type (numpy, a 0-d tensor) for the FLOPs options.
    """
    schedule = cfg.schedule
    if schedule is None:
        object.__setattr__(cfg, "schedule", ScheduleConfig())
    elif isinstance(schedule, Mapping):
        check_keys(schedule, field_names(ScheduleConfig), where="schedule.")
        object.__setattr__(cfg, "schedule", ScheduleConfig(**schedule))
    elif not isinstance(schedule, ScheduleConfig):
        raise PerfConfigError(
            f"schedule must be a mapping with keys {field_names(ScheduleConfig)}, got {type(schedule).__name__}"
        )
    for name in ("activities", "ranks", "nsys_steps"):
        if isinstance(getattr(cfg, name), list):
            object.__setattr__(cfg, name, tuple(getattr(cfg, name)))
    for name in ("flops_per_step", "peak_tflops", "peak_tbps"):  # a numpy or 0-d tensor number too
        value = getattr(cfg, name)
        if not isinstance(value, int | float | None) and (number := as_real(value)) is not None:
            object.__setattr__(cfg, name, number)

"""The metadata a window writes into its trace, besides the profiler's events.

At the session's creation: the run's FLOPs per step, the machine, the device and the run's memory growth (once
measured). When the profiler starts recording: the model's modules (parameters and FLOPs by module, whether their spans
are recorded), and the counters the window's load is measured from. At the window's end: that load (the training
thread's and the loader workers' CPU time and wait) and the bytes of parameters, gradients and optimizer state. The
analysis reads each under its ``META_KEY``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from perf_callbacks.core.context import RunContext
from perf_callbacks.core.flops.step import META_KEY as FLOPS_META_KEY
from perf_callbacks.core.memory.growth import META_KEY as GROWTH_META_KEY
from perf_callbacks.core.memory.parts import META_KEY as PARTS_META_KEY
from perf_callbacks.core.memory.parts import WindowParts
from perf_callbacks.core.module_spans import META_KEY as MODULES_META_KEY
from perf_callbacks.core.module_spans import modules_meta
from perf_callbacks.core.ranges.module_ranges import ModuleRanges
from perf_callbacks.core.timing.worker_load import META_KEY as LOAD_META_KEY
from perf_callbacks.core.timing.worker_load import LoadMark, LoadProbe
from perf_callbacks.core.warn import quiet
from perf_callbacks.core.windows.device_meta import META_KEY as DEVICE_META_KEY
from perf_callbacks.core.windows.device_meta import device_meta
from perf_callbacks.core.windows.machine import META_KEY as MACHINE_META_KEY
from perf_callbacks.core.windows.machine import machine_meta
from perf_callbacks.core.windows.profiler import ProfilerSession

ModuleFlops = Callable[[], tuple[dict[str, int] | None, str]]
"""The engine's FLOPs by module, and a note on them."""


def preset_meta(session: ProfilerSession, ctx: RunContext, cuda: bool, peak_tbps: float | None,
                flops: Callable[[], dict[str, Any]] | None,
                growth: Callable[[], dict[str, Any] | None] | None) -> None:
    """What is known when the session is created: the run's FLOPs, the machine, the device, the memory growth."""
    if flops is not None:
        session.preset_meta(FLOPS_META_KEY, flops())
    session.preset_meta(MACHINE_META_KEY, machine_meta(ctx, cuda))
    session.preset_meta(DEVICE_META_KEY, device_meta(ctx, cuda, peak_tbps))
    if growth is not None and (measured := growth()) is not None:
        session.preset_meta(GROWTH_META_KEY, measured)


def module_meta(session: ProfilerSession | None, model: torch.nn.Module | None, ranges: ModuleRanges | None,
                module_flops: ModuleFlops | None) -> None:
    """Module spans' metadata (parameters and FLOPs by module, whether spans are recorded) into the trace."""
    if session is None or ranges is None:
        return
    flops, flops_note = module_flops() if module_flops is not None else (None, "")
    session.add_meta(MODULES_META_KEY, modules_meta(model, ranges.tracing, ranges.note, flops, flops_note))


def load_mark(ctx: RunContext) -> LoadMark | None:
    """The counters at the window's start (None when they could not be read)."""
    return quiet(LoadProbe(ctx.data_loader[1]).mark)


def record_load(session: ProfilerSession, ctx: RunContext, mark: LoadMark | None) -> None:
    """The window's load (the training thread's and the loader workers' CPU time and wait) into its trace."""
    if mark is not None and session.recording:
        load = LoadProbe(ctx.data_loader[1]).since(mark)
        quiet(lambda: session.add_meta(LOAD_META_KEY, load.meta()))


def record_parts(session: ProfilerSession, parts: WindowParts | None) -> None:
    """The bytes of parameters, gradients and optimizer state at the window's end into its trace."""
    if parts is not None and session.recording:
        quiet(lambda: session.add_meta(PARTS_META_KEY, parts.meta()))

"""Owns one ``torch.profiler.profile`` object: warm-up, record, step markers, stop, export.

The engine creates a session only when a window is about to start and drops it when the window is exported, so
nothing of the profiler stays alive (or costs anything) between windows. Steps are marked with the same
``ProfilerStep#N`` annotation that ``torch.profiler`` itself uses, numbered by the global optimizer step.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from perf_callbacks.config import PerfConfig

log = logging.getLogger(__name__)


def resolve_activities(config: PerfConfig, cuda_available: bool) -> list[torch.profiler.ProfilerActivity]:
    """CPU, plus CUDA when available, unless ``config.activities`` names them."""
    names = config.activities or (("cpu", "cuda") if cuda_available else ("cpu",))
    table = {"cpu": torch.profiler.ProfilerActivity.CPU, "cuda": torch.profiler.ProfilerActivity.CUDA}
    return [table[n] for n in names if n != "cuda" or cuda_available]


def foreign_profiler_running() -> bool:
    """True when some other autograd/kineto profiler (e.g. the user's own ``torch.profiler``) is active."""
    try:
        return bool(torch.autograd.profiler._is_profiler_enabled)
    except AttributeError:  # pragma: no cover - older torch
        return False


class ProfilerSession:
    """One profiling cycle: ``prepare`` (warm-up) -> ``start`` (record) -> ``mark_step`` ... -> ``stop`` -> ``export``.

    Args:
        config: profiler options (activities, record_shapes, profile_memory, with_stack, with_flops).
        cuda_available: whether to add the CUDA activity by default.
        distributed_info: written as the trace's ``distributedInfo`` when ``torch.distributed`` is not initialised
            (HTA and the report need the rank).
    """

    def __init__(self, config: PerfConfig, cuda_available: bool, distributed_info: dict[str, Any] | None) -> None:
        self.recording = False
        self._step_fn: Any = None
        self._prof = torch.profiler.profile(
            activities=resolve_activities(config, cuda_available),
            record_shapes=config.record_shapes,
            profile_memory=config.profile_memory,
            with_stack=config.with_stack,
            with_flops=config.with_flops,
        )
        if distributed_info is not None:
            self._prof.preset_metadata_json("distributedInfo", json.dumps(distributed_info))
        self._prepared = False

    def preset_meta(self, key: str, value: dict[str, Any]) -> None:
        """A top-level ``key`` of the exported trace, holding ``value`` (JSON); call before :meth:`prepare`."""
        self._prof.preset_metadata_json(key, json.dumps(value))

    def add_meta(self, key: str, value: dict[str, Any]) -> None:
        """A top-level ``key`` of the exported trace, holding ``value`` (JSON); call while recording."""
        self._prof.add_metadata_json(key, json.dumps(value))

    @property
    def stolen(self) -> bool:
        """Recording, but torch's profiler is off: another profiler stopped it (its events are gone)."""
        return self.recording and not foreign_profiler_running()

    def prepare(self) -> None:
        """Start the warm-up: the profiler runs but its events are discarded."""
        if not self._prepared:
            self._prof.prepare_trace()
            self._prepared = True

    def start(self) -> None:
        """Start recording (warming up first if :meth:`prepare` was not called)."""
        self.prepare()
        if not self.recording:
            self._prof.start_trace()
            self.recording = True

    def mark_step(self, step: int) -> None:
        """Close the previous ``ProfilerStep#`` span and open ``ProfilerStep#{step}``."""
        self.end_step()
        self._step_fn = torch.profiler.record_function(f"ProfilerStep#{step}")
        self._step_fn.__enter__()

    def end_step(self) -> None:
        """Close the open ``ProfilerStep#`` span, if any."""
        if self._step_fn is not None:
            fn, self._step_fn = self._step_fn, None
            fn.__exit__(None, None, None)

    def stop(self) -> None:
        """Stop collecting (idempotent). Events stay in memory until :meth:`export`.

        A session stopped in its warm-up (the run ended there) is started first: stopping a Kineto session that was
        only prepared prints "disableProfiler called but no active profiling session found" (torch 2.5+), and on
        torch 2.4 raises and leaves Kineto unusable for the rest of the process.
        """
        self.end_step()
        if self._prepared:
            self._prepared = False
            if not self.recording:
                self._prof.start_trace()
            self.recording = False
            self._prof.stop_trace()

    def export(self, path: Path) -> None:
        """Write the uncompressed Chrome trace of the stopped session to ``path``."""
        self._prof.export_chrome_trace(str(path))

"""torch.compile health: compile time, recompilations and graph breaks, read from what torch records itself.

Three things torch keeps (each read by name, with a default: a torch without one loses that figure, never training):

- ``torch._dynamo.callback.callback_handler``: callbacks around each compilation (Dynamo tracing a frame and its
  backend compiling it; in recent releases also a backward compiled at its first run). Ours time the outermost one
  with ``perf_counter`` and take any arguments (none in older releases, a ``CallbackArgs`` in newer ones).
- ``torch._dynamo.utils.get_compilation_metrics()``: one record per compiled frame; ``cache_size`` (entries the frame
  already had: 1 or more makes it a recompilation), ``recompile_reason`` (the guard that failed, where torch records
  it) and ``fail_reason`` (torch's recompile limit reached: the frame then runs eagerly).
- ``torch._dynamo.utils.graph_break_reasons``: one record per graph break (``reason``, ``user_stack``), the list that
  ``torch._dynamo.explain`` reads.

Nothing runs per step: the callbacks run only while torch compiles, the engine polls after a step that compiled and
at logging steps, and nothing is installed until ``torch._dynamo`` is loaded (``torch.compile`` loads it; importing it
here would cost a second). The callbacks never raise and never warn (a warning made an error by ``-W error`` inside
torch's compiler would stop training): findings are said from :meth:`CompileWatch.poll`, on the training thread.

A **recompile storm** is recompilations at ``STORM_STEPS`` (5) or more different optimizer steps within the last
``STORM_WINDOW`` (50) steps, not counting the first step that compiled nor validation, or torch reaching its recompile
limit for a function. A model compiled once per input shape bucket recompiles once per bucket, the first time each
appears: up to 5 buckets (4 recompilations, even 4 in a row) are never a storm; a size or a Python number that
changes every few steps is, within 5 changes.

Example:
    >>> seconds = []
    >>> watch = CompileWatch(lambda key, category, message: None, seconds.append)
    >>> watch.add_metrics(metrics := {}, step=0)  # nothing compiled: no figure
    >>> metrics
    {}
"""

from __future__ import annotations

import inspect
import sys
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

import torch

from perf_callbacks.core.flops.compile_text import break_line, graph_break_message, storm_message
from perf_callbacks.core.warn import WarnFn
from perf_callbacks.exceptions import CompileWarning, InstrumentUnavailableWarning

STORM_STEPS = 5
STORM_WINDOW = 50


def is_compiled(model: Any) -> bool:
    """Whether ``model`` or a submodule is compiled: ``torch.compile(module)``, ``module.compile()``, Lightning's."""
    if model is None or "torch._dynamo" not in sys.modules:
        return False
    modules = model.modules() if isinstance(model, torch.nn.Module) else [model]
    return any(hasattr(m, "_orig_mod") or getattr(m, "_compiled_call_impl", None) is not None
               or getattr(m, "_compiler_ctx", None) is not None for m in modules)


class CompileWatch:
    """Counts and times torch.compile's compilations for the engine, and says a recompile storm or graph breaks once.

    Args:
        warn: ``warn(key, category, message)``, the engine's warn-once (rank 0).
        on_compile: called with each compilation's seconds as it ends (the engine sets them aside); never raises here.
            A bound method is held weakly: torch's callbacks, which hold this watch, never keep an engine alive.
    """

    def __init__(self, warn: WarnFn, on_compile: Callable[[float], None]) -> None:
        self._warn = warn
        self._on_compile: Callable[[], Callable[[float], None] | None] = (
            weakref.WeakMethod(on_compile) if inspect.ismethod(on_compile) else lambda: on_compile)
        self.installed = False
        self.dirty = False  # a compilation ended since the last poll
        self.active = False  # something compiled in this run: the interval figures are logged from then on
        self._error: BaseException | None = None
        self._depth, self._t0 = 0, 0.0
        self._seconds, self._recompiles, self._breaks = 0.0, 0, 0  # in this logging interval
        self._last: Any = None  # the last compilation record read
        self._breaks_seen = 0
        self._first_step: int | None = None
        self._storm: deque[tuple[int, float]] = deque()  # (step, compile seconds in it) of steps that recompiled
        self._pending_s = 0.0  # compile seconds since the last poll
        self._reason: Any = None  # the last recompilation's record
        self._gave_up: Any = None  # a record of torch reaching its recompile limit
        self.install()

    def install(self) -> bool:
        """Register the callbacks once ``torch._dynamo`` is loaded (again after ``torch._dynamo.reset()``)."""
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None or self._error is not None:
            return self.installed
        try:
            handler = dynamo.callback.callback_handler
            if not self.installed:  # what torch recorded before this run is not this run's
                self._new_records()
                self._new_breaks()
            if self._start not in handler.start_callbacks:
                handler.register_start_callback(self._start)
            if self._end not in handler.end_callbacks:
                handler.register_end_callback(self._end)
            self.installed = True
        except Exception as err:  # noqa: BLE001 - a torch without these hooks: no compile figures
            self._fail(err)
        return self.installed

    # ---- torch's callbacks: only while it compiles ----------------------------------------------------------------
    def _start(self, *_: Any) -> None:
        if self._depth == 0:
            self._t0 = time.perf_counter()
        self._depth += 1

    def _end(self, *_: Any) -> None:
        self._depth = max(self._depth - 1, 0)
        if self._depth or self._error is not None:
            return
        seconds = time.perf_counter() - self._t0
        self._seconds += seconds
        self._pending_s += seconds
        self.active = self.dirty = True
        try:
            if (on_compile := self._on_compile()) is not None:
                on_compile(seconds)
        except Exception as err:  # noqa: BLE001 - never into torch's compiler
            self._error = err

    # ---- the training thread ----------------------------------------------------------------------------------
    def poll(self, step: int | None) -> None:
        """Read what torch recorded since the last poll; ``step``: the optimizer step it ran in (None: validation)."""
        self.dirty = False
        said: list[tuple[str, str]] = []
        if self._error is None and self.installed:
            try:
                said = self._read(step)
            except Exception as err:  # noqa: BLE001 - instrumentation must never break training
                self._fail(err)
        if self._error is not None:
            self._disable()
        for key, message in said:
            self._warn(key, CompileWarning, message)

    def add_metrics(self, metrics: dict[str, float], step: int | None) -> None:
        """Add the logging interval's ``compile/...`` figures (once anything compiled in this run) and start anew."""
        if self.install() and (self.dirty or self._unread()):  # also after torch._dynamo.reset()
            dirty = self.dirty
            self.poll(step)
            self.dirty = dirty and self._error is None  # the step's end still sees that it compiled
        if self.active:
            metrics.update({"compile/seconds": self._seconds, "compile/recompiles": float(self._recompiles),
                            "compile/graph_breaks": float(self._breaks)})
        self._seconds, self._recompiles, self._breaks = 0.0, 0, 0

    def close(self) -> None:
        """Unregister the callbacks."""
        dynamo = sys.modules.get("torch._dynamo")
        handler = getattr(getattr(dynamo, "callback", None), "callback_handler", None)
        for name, fn in (("start_callbacks", self._start), ("end_callbacks", self._end)):
            callbacks = getattr(handler, name, [])
            while fn in callbacks:
                callbacks.remove(fn)
        self.installed = False

    def _read(self, step: int | None) -> list[tuple[str, str]]:
        """Count the new records; returns the findings to say, ``(key, message)``."""
        records, breaks = self._new_records(), self._new_breaks()
        if self._first_step is None and step is not None and records:
            self._first_step = step
        spent, self._pending_s = self._pending_s, 0.0
        for rec in records:
            if _gave_up(rec):
                self._gave_up = self._gave_up or rec
            elif (getattr(rec, "cache_size", None) or 0) >= 1:
                self._recompiles += 1
                self._reason = rec
                if step is not None and step != self._first_step and (not self._storm or self._storm[-1][0] != step):
                    self._storm.append((step, spent))
        said = []
        if breaks:
            self._breaks += len(breaks)
            said.append(("graph_breaks", graph_break_message(Counter(break_line(b) for b in breaks), step)))
        while step is not None and self._storm and self._storm[0][0] <= step - STORM_WINDOW:
            self._storm.popleft()
        if self._gave_up is not None or len(self._storm) >= STORM_STEPS:
            said.append(("recompile_storm", storm_message(list(self._storm), STORM_WINDOW, self._reason,
                                                          self._gave_up)))
        return said

    def _unread(self) -> bool:
        """Whether torch may hold a record or graph break not read yet.

        A recompile limit reached is a record made without a compilation. O(1) on torch's own deque, so that a logging
        step of a run that compiles nothing copies no list; True where torch keeps them elsewhere.
        """
        try:
            utils = sys.modules["torch._dynamo"].utils
            records, breaks = utils._compilation_metrics, len(utils.graph_break_reasons)
            return bool(records and records[-1] is not self._last) or breaks != self._breaks_seen
        except Exception:  # noqa: BLE001 - another torch: read the public way
            return True

    def _new_records(self) -> list[Any]:
        records = list(sys.modules["torch._dynamo"].utils.get_compilation_metrics())
        if not records or records[-1] is self._last:
            return []
        seen = next((i for i in range(len(records) - 1, -1, -1) if records[i] is self._last), -1)
        self._last = records[-1]
        return records[seen + 1:]

    def _new_breaks(self) -> list[Any]:
        reasons = sys.modules["torch._dynamo"].utils.graph_break_reasons
        if len(reasons) < self._breaks_seen:  # torch._dynamo.reset() emptied it
            self._breaks_seen = 0
        new = list(reasons[self._breaks_seen:])
        self._breaks_seen = len(reasons)
        return new

    def _fail(self, err: BaseException) -> None:
        self._error = err
        self._disable()

    def _disable(self) -> None:
        self.close()
        self.dirty = self.active = False
        self._warn("compile_watch", InstrumentUnavailableWarning,
                   f"torch.compile figures are off for this run: reading torch's compile records failed "
                   f"({type(self._error).__name__}: {self._error}); training goes on")


def _gave_up(record: Any) -> bool:
    """Whether the record is torch declining to compile again: its recompile limit (cache size limit, formerly)."""
    reason = str(getattr(record, "fail_reason", None) or "").replace("_", " ").lower()
    return "recompile limit" in reason or "cache size limit" in reason

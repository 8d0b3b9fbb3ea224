"""One NVTX range per ``nn.Module`` forward, named by the module's qualified name, while a window is open.

With ``spans`` (``module_spans``), the same hooks also open a span in the torch trace, ``perf_callbacks.module/<path>``
(``core/module_spans.py``), through the fast record function of ``core/spans.py``: entered only while a profiler runs
and exited only if one still does, so another profiler or a user's ``record_function`` around it is safe. A compiled
model (``torch.compile``) gets no trace spans: hooks added after compilation are not run by its compiled code (or
would make it recompile), and a span inside a compiled region would break its graph.

:meth:`ModuleRanges.install` adds a forward pre-hook and a forward hook to every submodule of one model (never a
global hook, so other models are untouched) and :meth:`ModuleRanges.remove` takes them all off again, so outside the
window the model runs with no hooks at all. The ranges go to the same NVTX domain as :class:`NvtxRanges` with the
``module`` category, so Nsight Systems nests ``encoder.layers.0.attn`` inside ``forward`` inside ``step``.

The forward hooks are registered with ``always_call=True``, so they close their range even when ``forward`` raises. As
a second guard, ranges still open are closed at the next forward of the root module and by :meth:`remove`, so pushes
and pops always balance.

Example:
    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    >>> ranges = ModuleRanges(NvtxRanges())
    >>> _ = ranges.install(model); _ = model(torch.zeros(1, 2)); ranges.remove()
    >>> len(model._forward_pre_hooks), ranges.depth
    (0, 0)
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from perf_callbacks.core.flops.compile_watch import is_compiled
from perf_callbacks.core.module_spans import SPAN_PREFIX, module_paths
from perf_callbacks.core.ranges.nvtx import NvtxRanges
from perf_callbacks.core.spans import enter_span, exit_span
from perf_callbacks.core.warn import warn_user
from perf_callbacks.exceptions import InstrumentUnavailableWarning

CATEGORY = "module"
#: ARGB grey. An integer, because the nvtx package only knows a few colour names without matplotlib.
COLOR = 0xFF9E9E9E


class ModuleRanges:
    """Per-module NVTX ranges for one model, installed and removed around a profiling window.

    Args:
        ranges: the step/phase ranges; module ranges use its domain and only exist while it is enabled.
        spans: also open a span per module forward in the torch trace.
    """

    def __init__(self, ranges: NvtxRanges, spans: bool = False) -> None:
        self.ranges = ranges
        self.spans = spans
        self.tracing = False  # trace spans are opened by the hooks installed now
        self.note = ""  # why no trace spans are recorded, when spans are asked for and not recorded
        self._open: list[Any] = []  # the trace spans open, innermost last
        self.depth = 0
        self._domain: Any = None
        self._attrs: dict[str, Any] = {}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._root: torch.nn.Module | None = None
        self._failed = False

    @property
    def installed(self) -> bool:
        """Whether hooks are currently on a model."""
        return bool(self._handles)

    def install(self, model: torch.nn.Module) -> int:
        """Add range hooks to every submodule of ``model``; return how many (0 when no NVTX tool listens)."""
        self.remove()
        self.tracing = self._can_trace(model)
        domain = self._get_domain()
        if domain is None and not self.tracing:
            return 0
        try:
            for (path, _), (name, module) in zip(module_paths(model), model.named_modules(), strict=True):
                qualified = name or type(module).__name__
                if domain is not None and qualified not in self._attrs:
                    self._attrs[qualified] = domain.get_event_attributes(
                        message=qualified, color=COLOR, category=CATEGORY
                    )
                self._handles.append(module.register_forward_pre_hook(self._pre_hook(qualified, path)))
                self._handles.append(module.register_forward_hook(self._post_hook, always_call=True))
        except Exception as err:  # noqa: BLE001 - never harm training
            self._fail(err)
            return 0
        self._root = model
        return len(self._handles) // 2

    def remove(self) -> None:
        """Remove every hook and close ranges left open by a forward that raised."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._root = None
        self._pop_open()

    def _pre_hook(self, name: str, path: str) -> Any:
        attrs = self._attrs.get(name)
        span = SPAN_PREFIX + path

        def hook(module: torch.nn.Module, args: Any) -> None:
            if module is self._root and (self.depth or self._open):
                self._pop_open()  # the previous forward raised before its forward hooks ran
            try:
                if self.tracing:
                    self._open.append(enter_span(span))
                if attrs is not None and self._domain is not None:
                    self._domain.push_range(attrs)
                    self.depth += 1
            except Exception as err:  # noqa: BLE001
                self._fail(err)

        return hook

    def _post_hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        try:
            if self.depth:
                self._domain.pop_range()
                self.depth -= 1
            if self._open:
                exit_span(self._open.pop())
        except Exception as err:  # noqa: BLE001
            self._fail(err)

    def _pop_open(self) -> None:
        while self._open:
            exit_span(self._open.pop())
        while self.depth > 0 and self._domain is not None:
            self._domain.pop_range()
            self.depth -= 1
        self.depth = 0

    def _can_trace(self, model: torch.nn.Module) -> bool:
        """Whether trace spans go on ``model`` (asked for, and not compiled); ``note`` says why not."""
        self.note = ""
        if not self.spans or self._failed:
            self.note = "module spans failed earlier in this run" if self.spans else ""
            return False
        if is_compiled(model):
            self.note = "the model is compiled (torch.compile): its compiled code runs no module hooks"
            return False
        return True

    def _get_domain(self) -> Any:
        """Return the ``nvtx.Domain`` of ``ranges``; None when NVTX is off or no tool is attached (a no-op domain)."""
        if self._failed or not self.ranges.enabled:
            return None
        if self._domain is None:
            try:
                import nvtx

                domain = nvtx.get_domain(self.ranges.domain_name)
            except Exception as err:  # noqa: BLE001
                self._fail(err)
                return None
            if not isinstance(domain, nvtx.Domain):
                return None
            self._domain = domain
        return self._domain

    def _fail(self, err: BaseException) -> None:
        with contextlib.suppress(Exception):  # already failing; the warning below says so
            self._pop_open()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._root = None
        self._domain = None
        self._failed = True
        self.tracing = False
        self.depth = 0
        self._open.clear()
        what = "NVTX ranges and spans" if self.spans else "NVTX ranges"
        warn_user(f"per-module {what} disabled: {type(err).__name__}: {err}. Training continues without them.",
                  InstrumentUnavailableWarning)

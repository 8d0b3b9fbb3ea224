"""Counting optimizer steps under Accelerate, whatever the loop's shape (a mixin of :class:`AcceleratePerfHook`).

- Step pre/post hooks on the torch optimizer inside each ``AcceleratedOptimizer`` open the ``optimizer_step`` phase
  and count. ``AcceleratedOptimizer.step()`` does nothing until ``sync_gradients``, so with gradient accumulation
  ``ProfilerStep#N`` spans all micro-batches of optimizer step ``N``; several optimizers stepping in one micro-batch
  make one step. A step that fp16's ``GradScaler`` skips still counts, as in Lightning.
- Without ``hook.iter`` the first optimizer to step marks the steps: a step ends at its optimizer step and the next
  begins right away (data wait is then not measured).
- Optimizers without torch step hooks (DeepSpeed's and other wrappers) are counted through
  ``AcceleratedOptimizer.step()`` when ``accelerator.sync_gradients`` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from perf_callbacks.core.engine import PerfEngine
from perf_callbacks.integrations._accelerate_state import put_count, take_count

if TYPE_CHECKING:
    from accelerate import Accelerator

log = logging.getLogger(__name__)


class StepCounting:
    """The optimizer-step bookkeeping of the hook; the attributes are the hook's own."""

    engine: PerfEngine | None
    accelerator: Accelerator | None
    optimizer_steps: int
    _in_batch: bool
    _stepped: bool
    _closed: bool
    _lead: int | None
    _hooked: set[int]
    _handles: list[Any]
    _restore: list[Callable[[], Any]]

    def _require(self) -> tuple[PerfEngine, Accelerator]:
        raise NotImplementedError

    def _hook_optimizers(self) -> None:
        for opt in self._require()[1]._optimizers:
            inner = getattr(opt, "optimizer", opt)  # hooks on the AcceleratedOptimizer itself raise
            if id(inner) in self._hooked:
                continue
            self._hooked.add(id(inner))
            if not hasattr(inner, "register_step_post_hook"):  # DeepSpeed and other wrappers: no torch step hooks
                self._wrap_optimizer_step(opt, inner)
                continue
            self._handles += [inner.register_step_pre_hook(self._before_step),
                              inner.register_step_post_hook(self._after_step),
                              inner.register_state_dict_post_hook(self._save_count),
                              inner.register_load_state_dict_post_hook(take_count)]

    def _wrap_optimizer_step(self, opt: Any, inner: Any) -> None:
        """Count steps through ``AcceleratedOptimizer.step`` where the optimizer has no hooks (once, with a note)."""
        step = opt.step

        def counted_step(*args: Any, **kwargs: Any) -> Any:
            self._before_step(inner, args, kwargs)
            try:
                return step(*args, **kwargs)
            finally:
                if self.accelerator is not None and self.accelerator.sync_gradients:
                    self._after_step(inner, args, kwargs)
                elif self.engine is not None and self._in_batch:
                    self.engine.end_phase()

        opt.step = counted_step
        self._restore.append(lambda: vars(opt).pop("step", None))
        log.info("perf-callbacks: %s has no torch step hooks; optimizer steps are counted when "
                 "AcceleratedOptimizer.step() runs with accelerator.sync_gradients", type(inner).__name__)

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        engine = self._open_engine()
        if engine is not None:
            engine.phase("optimizer_step")

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        engine = self.engine
        if engine is not None and not self._closed:
            engine.end_phase()
        if self._in_batch or engine is None or self._closed:
            self._count_step()
            return
        # No hook.iter(): one optimizer (the first to step) marks the steps; a step ends at its optimizer step and the
        # next begins right away, so its data loading and forward are in it, and data wait is not measured.
        self._lead = self._lead if self._lead is not None else id(optimizer)
        if id(optimizer) != self._lead:
            return
        engine.batch_end(True, None)
        self.optimizer_steps += 1
        engine.batch_start(self.optimizer_steps, phase=None)

    def _count_step(self) -> None:
        if not self._stepped:  # several optimizers stepping in one micro-batch make one step
            self._stepped = True
            self.optimizer_steps += 1

    def _overflow_skipped(self) -> bool:
        acc = self.accelerator
        return acc is not None and acc.sync_gradients and any(
            getattr(o, "step_was_skipped", False) for o in acc._optimizers
        )

    def _open_engine(self) -> PerfEngine | None:
        """The engine, when a step is open to hold a phase (a micro-batch of hook.iter(), or a counted step)."""
        engine = self.engine
        if engine is None or self._closed:
            return None
        if not self._in_batch and engine.step is None:  # no hook.iter(): the first step begins at its first backward
            engine.batch_start(self.optimizer_steps, phase=None)
        return engine

    def _save_count(self, optimizer: Any, state: dict[str, Any]) -> dict[str, Any]:
        return put_count(state, self.optimizer_steps)

    def _restored_count(self) -> int:
        counts = [take_count(getattr(o, "optimizer", o)) for o in self._require()[1]._optimizers]
        return max((c for c in counts if c is not None), default=0)

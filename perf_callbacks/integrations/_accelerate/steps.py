"""Counting optimizer steps under Accelerate, whatever the loop's shape (a mixin of :class:`AcceleratePerfHook`).

- Step pre/post hooks on the torch optimizer inside each ``AcceleratedOptimizer`` open the ``optimizer_step`` phase
  and count. ``AcceleratedOptimizer.step()`` does nothing until ``sync_gradients``, so with gradient accumulation
  ``ProfilerStep#N`` spans all micro-batches of optimizer step ``N``; several optimizers stepping in one micro-batch
  make one step. A step that fp16's ``GradScaler`` skips (no torch hook runs) still counts, as in Lightning: it is
  seen by the ``AcceleratedOptimizer.step()`` call that reports ``step_was_skipped``, never by a later micro-batch.
- Without ``hook.iter`` the first optimizer to step marks the steps: a step ends at its optimizer step and the next
  begins right away (data wait is then not measured); the interval metrics are flushed there, at logging steps.
- Optimizers without torch step hooks (DeepSpeed's and other wrappers) are counted through
  ``AcceleratedOptimizer.step()`` when ``accelerator.sync_gradients`` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from perf_callbacks.core.engine.engine import PerfEngine
from perf_callbacks.integrations._accelerate.metrics import CrossRankLogger
from perf_callbacks.integrations._accelerate.state import put_count, take_count

if TYPE_CHECKING:
    from accelerate import Accelerator

log = logging.getLogger(__name__)


class StepCounting:
    """The optimizer-step bookkeeping of the hook; the attributes are the hook's own."""

    engine: PerfEngine | None
    accelerator: Accelerator | None
    optimizer_steps: int
    metrics: CrossRankLogger | None
    _flushed: int
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
            hooked = hasattr(inner, "register_step_post_hook")  # DeepSpeed and other wrappers: no torch step hooks
            if not hooked or opt is not inner:
                self._wrap_optimizer_step(opt, inner, hooked)
            if hooked:
                self._handles += [inner.register_step_pre_hook(self._before_step),
                                  inner.register_step_post_hook(self._after_step),
                                  inner.register_state_dict_post_hook(self._save_count),
                                  inner.register_load_state_dict_post_hook(take_count)]

    def _wrap_optimizer_step(self, opt: Any, inner: Any, hooked: bool) -> None:
        """Wrap ``AcceleratedOptimizer.step``: count a step fp16 skipped, and every step when ``inner`` has no hooks."""
        step = opt.step

        def counted_step(*args: Any, **kwargs: Any) -> Any:
            if not hooked:
                self._before_step(inner, args, kwargs)
            try:
                out = step(*args, **kwargs)
            finally:
                if not hooked and self._synced():
                    self._after_step(inner, args, kwargs)
                elif not hooked and self.engine is not None and not self._closed:  # a micro-batch that does not
                    self.engine.end_phase()  # sync: the phase _before_step opened ends here (in a plain loop too)
            if hooked and self._synced() and getattr(opt, "step_was_skipped", False):  # GradScaler skipped it
                self._after_step(inner, args, kwargs)
            return out

        opt.step = counted_step
        self._restore.append(lambda: vars(opt).pop("step") if vars(opt).get("step") is counted_step else None)
        if not hooked:
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
            if self._in_batch and engine is not None and not self._closed:
                engine.state.own_code()  # the rest of the loop body (or a `break`) is the user's own time
            return
        # No hook.iter(): one optimizer (the first to step) marks the steps; a step ends at its optimizer step and the
        # next begins right away, so its data loading and forward are in it, and data wait is not measured.
        self._lead = self._lead if self._lead is not None else id(optimizer)
        if id(optimizer) != self._lead:
            return
        engine.batch_end(True, None)
        self.optimizer_steps += 1
        self._flush_interval()  # every rank steps here at the same count: at logging steps, the cross-rank gather
        engine.batch_start(self.optimizer_steps, phase=None)

    def _count_step(self) -> None:
        if not self._stepped:  # several optimizers stepping in one micro-batch make one step
            self._stepped = True
            self.optimizer_steps += 1

    def _synced(self) -> bool:
        return self.accelerator is not None and bool(self.accelerator.sync_gradients)

    def _flush_interval(self, at_close: bool = False, short: bool = False) -> None:
        """At a logging step, gather the interval metrics across ranks (every rank reaches it at the same count).

        ``at_close``: a clean close, where other ranks may have failed: no collective (see ``flush_at_close``).
        ``short``: the engine logged a run shorter than one logging interval at close (any step count).
        """
        engine, steps = self.engine, self.optimizer_steps
        if engine is None or self.metrics is None or self._closed or steps == self._flushed:
            return
        if steps % engine.ctx.log_every_n_steps == 0 or short:
            self._flushed = steps
            with engine.tool_time("log"):
                if at_close:
                    self.metrics.flush_at_close(steps, engine.ctx.run_name)
                else:
                    self.metrics.flush(steps)

    def _open_engine(self) -> PerfEngine | None:
        """The engine, when a step is open to hold a phase (a micro-batch of hook.iter(), or a counted step)."""
        engine = self.engine
        if engine is None or self._closed:
            return None
        if not self._in_batch and engine.step is None:  # no hook.iter(): the first step begins at its first backward
            engine.batch_start(self.optimizer_steps, phase=None)
        engine.state.own = None  # the step's work (a backward, a phase, an optimizer's step), not the user's code
        return engine

    def _save_count(self, optimizer: Any, state: dict[str, Any]) -> dict[str, Any]:
        return put_count(state, self.optimizer_steps)

    def _restored_count(self) -> int:
        counts = [take_count(getattr(o, "optimizer", o)) for o in self._require()[1]._optimizers]
        return max((c for c in counts if c is not None), default=0)

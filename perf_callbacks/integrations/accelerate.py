"""Accelerate adapter: ``hook.register(accelerator)`` after ``prepare()``, then ``for batch in hook.iter(loader)``.

Accelerate has no callbacks, so the hook drives the engine from a few places:

- ``hook.iter(loader)`` marks micro-batches and times the loader's ``next()`` alone as data wait. A prepared
  ``DataLoaderShard`` iterates one batch ahead and moves each batch to the device inside its iterator, so the wait for
  batch ``i`` covers the host-to-device copy of batch ``i`` and fetching/collating batch ``i + 1``.
- Optimizer steps are counted by step hooks on the torch optimizers (``_accelerate/steps.py``), with or without
  ``hook.iter``; ``accelerator.backward`` and ``accelerator.save_state`` are wrapped (instance attributes, removed by
  :meth:`AcceleratePerfHook.close`) for the ``backward`` and ``checkpoint`` ranges.
- The step count travels with ``save_state``/``load_state`` in either order (``_accelerate/state.py``), without
  ``register_for_checkpointing``, so checkpoints load with or without the hook.
- Preemption: while registered, and only if SIGTERM still has its default action, SIGTERM raises ``SystemExit(143)``
  so that the ``with`` block flushes the window before the process exits. A hook never closed is closed at exit as
  the ``with`` block would close it (with the uncaught exception or that ``SystemExit``, if any).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list

from perf_callbacks.config import PerfConfig, check_ranks
from perf_callbacks.core.engine.engine import PerfEngine, RunContext, now
from perf_callbacks.core.exit import catch_sigterm, release_sigterm
from perf_callbacks.core.files.remote import before_shutdown, resolve_output
from perf_callbacks.core.files.traces import new_run_name
from perf_callbacks.core.flops.compile_watch import is_compiled
from perf_callbacks.core.flops.peak import mixed_precision_dtype
from perf_callbacks.core.timing.fetch_clock import attach
from perf_callbacks.core.warn import quiet, warn_user
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from perf_callbacks.integrations._accelerate.loaders import check_loaders, loader_name
from perf_callbacks.integrations._accelerate.metrics import CrossRankLogger
from perf_callbacks.integrations._accelerate.phase import Phase
from perf_callbacks.integrations._accelerate.state import STATE_FILE, read_state, write_state
from perf_callbacks.integrations._accelerate.steps import StepCounting
from perf_callbacks.integrations._adapters import FromConfig, batch_size, distributed_initialized, in_phase

__all__ = ["STATE_FILE", "AcceleratePerfHook"]
log = logging.getLogger(__name__)
T = TypeVar("T")
OWNER_ATTR = "_perf_callbacks_hook"  # the hook registered on an Accelerator


class AcceleratePerfHook(StepCounting, FromConfig):
    """Profiler windows by optimizer step, NVTX ranges, memory/timing logs and DataLoader checks for Accelerate.

    Takes the same keys as :class:`~perf_callbacks.GPUPerfCallback` (see :class:`~perf_callbacks.PerfConfig`), or a
    ready ``config=PerfConfig(...)``; bad values raise ``PerfConfigError`` here. Call :meth:`register` on every
    process after ``accelerator.prepare(...)``, iterate the training loader through :meth:`iter`, and close the hook
    (``with`` block or :meth:`close`) so that an interrupted window is still written. Metrics go to
    ``accelerator.log`` when a tracker is set up, else to TensorBoard files under ``output_dir``.

    Example::

        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
        model, opt, loader = accelerator.prepare(model, opt, loader)
        with AcceleratePerfHook(schedule={"skip_first": 5, "active": 2}).register(accelerator) as hook:
            for x, y in hook.iter(loader):
                with accelerator.accumulate(model):
                    accelerator.backward(loss_fn(model(x), y))
                    opt.step()
                    opt.zero_grad()
    """

    def __init__(self, config: PerfConfig | None = None, **options: Any) -> None:
        super().__init__(config, **options)  # FromConfig: self.config
        self.engine: PerfEngine | None = None
        self.accelerator: Accelerator | None = None
        self.optimizer_steps = 0
        self._handles: list[Any] = []
        self._hooked: set[int] = set()
        self._checked: set[int] = set()
        self._in_batch = self._stepped = self._closed = False
        self._flushed = 0  # the step count at the last metrics flush
        self._batch_size: int | None = None
        self.metrics: CrossRankLogger | None = None
        self._sigterm = False
        self._standing_aside = False
        self._lead: int | None = None  # without hook.iter(), the optimizer whose steps are counted
        self._restore: list[Any] = []
        self._loop: Any = None  # the generator returned by iter(): its frame holds the current batch
        self._cancel_exit: Callable[[], None] = lambda: None  # the close at interpreter exit, once registered
        self._created = now()  # the ledger's start-up before and after the hook

    # ---- setup and teardown --------------------------------------------------------------------------------------
    def register(self, accelerator: Accelerator) -> AcceleratePerfHook:
        """Attach to ``accelerator`` (on every process, after ``prepare``); returns ``self``."""
        if self.engine is not None or self._standing_aside:
            raise RuntimeError("AcceleratePerfHook.register() was already called; create one hook per run")
        check_ranks(self.config.ranks, accelerator.num_processes)
        self.accelerator = acc = accelerator
        other = vars(acc).get(OWNER_ATTR)
        if other is not None and other is not self and not other._closed:
            self._standing_aside = True
            warn_user("a second AcceleratePerfHook was registered on this Accelerator; it stands aside (its iter() "
                      "yields the batches untouched) and the first one measures the run", InstrumentUnavailableWarning)
            return self
        vars(acc)[OWNER_ATTR] = self
        output_dir, remote = resolve_output(self._output_dir(acc), acc.process_index)
        ctx = RunContext(
            output_dir=output_dir,
            remote=remote,
            run_name=broadcast_object_list([new_run_name()])[0],  # every process must agree on the run folder
            rank=acc.process_index,
            world_size=acc.num_processes,
            device=acc.device,
            log_every_n_steps=self.config.log_every_n_steps or 50,
            # several processes gather the interval at every logging step (a collective): no floor
            log_min_interval_s=self.config.log_min_interval_s if acc.num_processes == 1 else 0.0,
            log_metrics=None,  # set below, once the run folder is known
            distributed_initialized=distributed_initialized(),
            compute_dtype=mixed_precision_dtype(getattr(acc, "mixed_precision", None)),
            created_at=self._created,
        )
        self.engine = PerfEngine(self.config, ctx)
        self.engine.mark_compiled(any(is_compiled(m) for m in acc._models))  # never counted: see core/flops/step.py
        self.engine.attach_owners(lambda: (list(acc._models), list(acc._optimizers)))  # those prepared so far
        if acc._models and (self.config.module_spans or self.config.nvtx_modules):
            self.engine.attach_model(acc._models[0])  # the first model prepared gets the module ranges and spans
        self.metrics = CrossRankLogger(acc, self.engine.run_dir / "tensorboard", self.engine.outputs)
        ctx.log_metrics = self.metrics.stash  # every rank; sent by the flush at the step boundary
        ctx.log_text = self.metrics.log_text if acc.is_main_process else None
        ctx.log_summary = self.metrics.log_local  # the window summary logs from one rank: no cross-rank gather
        self._sigterm = catch_sigterm()
        self._cancel_exit = before_shutdown(self._close_at_exit)  # before the engine's own, and before uploads stop
        self._handles += [acc.register_save_state_pre_hook(self._on_save)]
        self._handles += [acc.register_load_state_pre_hook(self._on_load)]
        self._hook_optimizers()
        self.optimizer_steps = self._flushed = max(self.optimizer_steps, self._restored_count())
        live = lambda: self.engine if not self._closed else None  # noqa: E731
        for name, wrap in (("backward", self._wrap_backward), ("save_state", in_phase(live, "checkpoint"))):
            if name not in vars(acc):  # instance attributes, removed by close() if still ours
                setattr(acc, name, wrapped := wrap(getattr(acc, name)))
                self._restore.append(lambda n=name, w=wrapped: vars(acc).pop(n) if vars(acc).get(n) is w else None)
        if self.config.check_dataloaders:
            self._check([(loader_name(acc, dl), dl) for dl in acc._dataloaders])
        return self

    def close(self, exc: BaseException | None = None) -> None:
        """Flush everything (the partial trace of an interrupted window too) and detach. Never raises."""
        if self.engine is None or self._closed:
            return
        if exc is None:  # a clean close (e.g. after a `break`): the last interval is still logged, with no collective
            self._end_batch(flush=False)  # and a run shorter than one logging interval logs its steps once
            self._flush_interval(at_close=True, short=self.engine.log_short_run())
        elif self._stepped:  # raised after the micro-batch's optimizer step (in validation, a save): the step completed
            self.engine.note_failure(exc)  # (its phase, for an out-of-memory summary)
            self._end_batch(flush=False)
        self._closed = True
        self._cancel_exit()
        if self.accelerator is not None and vars(self.accelerator).get(OWNER_ATTR) is self:
            del vars(self.accelerator)[OWNER_ATTR]
        self.engine.close(exc, batch=self._current_batch())  # the failing batch, for an out-of-memory summary
        for handle in self._handles:
            handle.remove()
        for restore in self._restore:
            restore()
        if self._sigterm:
            release_sigterm()
        if self.metrics is not None:
            self.metrics.close()

    def _close_at_exit(self) -> None:
        if self.engine is not None:
            self.close(self.engine.exit_cause())

    def __enter__(self) -> AcceleratePerfHook:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        self.close(exc)

    # ---- the training loop ---------------------------------------------------------------------------------------
    def iter(self, dataloader: Iterable[T]) -> Iterator[T]:
        """Yield the batches of ``dataloader``, timing the wait for each one (see the module docstring).

        Use it for the training loader only; wrap evaluation in :meth:`validation`.
        """
        if self._standing_aside:
            return iter(dataloader)
        engine, acc = self._require()
        self._hook_optimizers()
        engine.steps.epoch_start(engine.state.done, dataloader)  # the ledger's epochs (DataLoader worker start-up)
        name = loader_name(acc, dataloader)
        engine.ctx.data_loader = (name, getattr(dataloader, "num_workers", None))
        quiet(lambda: attach(dataloader), "timing the workers' fetches")
        if self.config.check_dataloaders:
            self._check([(name, dataloader)])
        loop = self._loop = self._iterate(dataloader)  # its frame holds the current batch (read on OOM)
        return loop

    def _iterate(self, dataloader: Iterable[T]) -> Iterator[T]:
        it = iter(dataloader)
        try:
            while True:
                self._end_batch(flush=True)
                engine = self.engine if not self._closed else None
                if engine is not None:
                    engine.data_start()
                try:
                    batch = next(it)
                except StopIteration:
                    return
                finally:
                    if engine is not None:
                        engine.data_end()
                self._start_batch(batch)
                yield batch
        finally:  # `break` out of the loop: the micro-batch is over, but no collective here
            self._end_batch(flush=False)

    def phase(self, name: str) -> Phase:
        """Open a named phase range (NVTX, and ``record_function`` inside windows) around a block of the loop body."""
        return Phase(self, name)

    @contextlib.contextmanager
    def validation(self) -> Iterator[None]:
        """Mark evaluation inside training: its own range, left out of step time and data wait."""
        if self.engine is not None:
            self.engine.validation_start()
        try:
            yield
        finally:
            if self.engine is not None:
                self.engine.validation_end()

    def _start_batch(self, batch: Any) -> None:
        if self._batch_size is None:
            self._batch_size = batch_size(batch)
        self._in_batch, self._stepped = True, False
        if self.engine is not None and not self._closed:
            self.engine.batch_start(self.optimizer_steps)
            self.engine.state.own_code(certain=False)  # the loop body's own code, or the forward: until a phase

    def _end_batch(self, flush: bool) -> None:
        if self._in_batch and not self._closed and self.engine is not None:
            self._in_batch = False
            self.engine.batch_end(self._stepped, self._batch_size)  # the engine adds up the step's micro-batches
        if flush:  # also the interval of a loop that broke out right after a logging step, when the next one starts
            self._flush_interval()

    def _wrap_backward(self, backward: Any) -> Any:
        def wrapped(loss: torch.Tensor, **kwargs: Any) -> Any:
            if self.accelerator is not None and len(self.accelerator._optimizers) > len(self._hooked):
                self._hook_optimizers()  # prepared after register(): hook them now, or a plain loop counts nothing
            with Phase(self, "backward"):
                return backward(loss, **kwargs)

        return wrapped

    # ---- checkpoints (see _accelerate/state.py) -------------------------------------------------------------------
    def _on_save(self, models: list[Any], weights: list[Any], output_dir: str) -> None:
        acc = self.accelerator
        if acc is not None and (acc.is_local_main_process if acc.project_configuration.save_on_each_node
                                else acc.is_main_process):
            steps, engine = self.optimizer_steps, self._require()[0]  # our file never fails the user's save
            engine.write_file("state", lambda: write_state(output_dir, steps), Path(output_dir) / STATE_FILE)

    def _on_load(self, models: list[Any], input_dir: str) -> None:
        steps = read_state(input_dir, self.optimizer_steps)
        if steps is not None:
            self.optimizer_steps, self._stepped = steps, False

    # ---- helpers -------------------------------------------------------------------------------------------------
    def _current_batch(self) -> Any:
        frame = getattr(self._loop, "gi_frame", None)
        return frame.f_locals.get("batch") if frame is not None and self._in_batch else None

    def _check(self, loaders: list[tuple[str, Any]]) -> None:
        check_loaders(*self._require(), loaders, self._checked)

    def _output_dir(self, acc: Accelerator) -> str | Path:
        if self.config.output_dir is not None:
            return self.config.output_dir
        return Path(acc.project_dir) / "perf" if acc.project_dir else Path("perf")

    def _require(self) -> tuple[PerfEngine, Accelerator]:
        if self.engine is None or self.accelerator is None:
            raise RuntimeError("call hook.register(accelerator) after accelerator.prepare(...) first")
        return self.engine, self.accelerator

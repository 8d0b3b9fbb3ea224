"""Hugging Face ``transformers`` adapter: ``Trainer(callbacks=[TransformersPerfCallback()])``.

The callback maps the Trainer's events onto the engine. In the loop of transformers 5.x (and 4.46+), one optimizer
step fetches all its micro-batches first (``Trainer.get_batch_samples``), then calls ``on_step_begin`` once,
``on_substep_end`` after each micro-batch but the last, ``on_pre_optimizer_step``/``on_optimizer_step`` around
``optimizer.step()`` and ``on_step_end`` after it. So:

- a micro-batch starts at ``on_step_begin`` or at the ``on_substep_end`` of the one before; the step is
  ``state.global_step`` (``ProfilerStep#N`` is optimizer step N, with gradient accumulation too);
- data wait is measured where callback events cannot see it: inside ``get_batch_samples``, the epoch iterator is
  wrapped so that only its ``__next__`` (the DataLoader) is timed.

Callbacks never receive the Trainer, so the callback finds it once, in ``on_init_end`` (or ``on_train_begin`` for a
callback added later), as ``self`` of the Trainer frame that fired the event. It then wraps, as instance attributes
removed when training ends: ``get_batch_samples`` (data wait), ``accelerator.backward`` (``backward`` range),
``evaluate`` (``validation`` range), ``_save_checkpoint`` (``checkpoint`` range) and ``train`` (so that an exception,
Ctrl-C or SIGTERM flushes the partial window before it propagates unchanged). Metrics go to the ``report_to``
integrations' ``on_log``, or to TensorBoard events of our own when there are none.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from typing_extensions import override

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.dataloader import Finding, inspect_accelerate_loader
from perf_callbacks.core.engine import PerfEngine, RunContext
from perf_callbacks.core.traces import new_run_name
from perf_callbacks.exceptions import InstrumentUnavailableWarning, PerfConfigError
from perf_callbacks.integrations._transformers_metrics import MetricsRouter

log = logging.getLogger(__name__)
_WRAPPED = ("get_batch_samples", "evaluate", "_save_checkpoint")


class TransformersPerfCallback(TrainerCallback):  # type: ignore[misc]
    """Profiler windows by optimizer step, NVTX ranges, memory/timing logs and DataLoader checks for ``Trainer``.

    Takes the same keys as :class:`~perf_callbacks.GPUPerfCallback` (see :class:`~perf_callbacks.PerfConfig`), or a
    ready ``config=PerfConfig(...)``; bad values raise ``PerfConfigError`` here. ``output_dir`` defaults to
    ``<args.output_dir>/perf`` and ``log_every_n_steps`` to the Trainer's ``logging_steps``.

    Example::

        from transformers import Trainer, TrainingArguments
        args = TrainingArguments("out", max_steps=20, gradient_accumulation_steps=3, use_cpu=True)
        trainer = Trainer(model, args, train_dataset=ds,
                          callbacks=[TransformersPerfCallback(schedule={"skip_first": 5, "active": 2})])
        trainer.train()
    """

    def __init__(self, config: PerfConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise PerfConfigError(f"pass either config= or options, not both (got config= and {sorted(options)})")
        self.config = config if config is not None else PerfConfig.from_dict(options)
        self.engine: PerfEngine | None = None
        self.trainer: Trainer | None = None
        self.metrics: MetricsRouter | None = None
        self._live = False
        self._samples = 0
        self._sigterm = False

    @classmethod
    def from_config(cls, config: PerfConfig) -> TransformersPerfCallback:
        """Build from an existing :class:`PerfConfig`."""
        return cls(config=config)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> TransformersPerfCallback:
        """Build from a standalone YAML file with the config keys at the top level."""
        return cls(config=PerfConfig.from_yaml(path))

    # ---- run lifecycle ---------------------------------------------------------------------------------------
    @override
    def on_init_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        self._bind(_find_trainer(sys._getframe(1)))

    @override
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        self._close(None)  # a previous train() call that ended without on_train_end
        trainer = _find_trainer(sys._getframe(1))
        self._bind(trainer)
        self._check_ranks(args)
        ctx = RunContext(
            output_dir=Path(self.config.output_dir or Path(args.output_dir) / "perf"),
            run_name=_broadcast_run_name(new_run_name()),
            rank=args.process_index,
            world_size=args.world_size,
            device=args.device,
            log_every_n_steps=self.config.log_every_n_steps or _logging_interval(args, state),
            data_loader=("train_dataloader", getattr(kw.get("train_dataloader"), "num_workers", None)),
            distributed_initialized=torch.distributed.is_available() and torch.distributed.is_initialized(),
        )
        self.engine = engine = PerfEngine(self.config, ctx)
        if state.is_world_process_zero:
            self.metrics = MetricsRouter(trainer, args, state, control, engine.layout.run_dir / "tensorboard")
            ctx.log_metrics, ctx.log_text = self.metrics.log_metrics, self.metrics.log_text
        if kw.get("model") is not None:
            engine.attach_model(kw["model"])
        self._live, self._samples = True, 0
        self._sigterm = _catch_sigterm()
        atexit.register(self._close, None)
        if trainer is None:
            engine._warn("no_trainer", InstrumentUnavailableWarning,
                         "perf-callbacks could not find the Trainer that runs this callback; data wait, backward, "
                         "evaluation and checkpoint ranges are off and metrics go to our own TensorBoard events")
        else:
            self._wrap(trainer)
        if self.config.check_dataloaders and kw.get("train_dataloader") is not None:
            self._check(kw["train_dataloader"], args)

    @override
    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        self._close(None)

    # ---- per micro-batch ---------------------------------------------------------------------------------------
    @override
    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        if self._live and self.engine is not None:
            self.engine.batch_start(state.global_step)

    @override
    def on_substep_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        if self._live and self.engine is not None:  # the next micro-batch is already fetched: it starts right away
            self.engine.batch_end(False)
            self.engine.batch_start(state.global_step)

    @override
    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self._live and self.engine is not None:
            self.engine.phase("optimizer_step")

    @override
    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self._live and self.engine is not None:
            self.engine.end_phase()

    @override
    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        if self._live and self.engine is not None:
            samples, self._samples = self._samples, 0
            self.engine.batch_end(True, samples or None)

    # ---- helpers -----------------------------------------------------------------------------------------------
    def _bind(self, trainer: Trainer | None) -> None:
        """Wrap ``trainer.train`` so that an exception flushes the window (once per Trainer)."""
        if trainer is None or trainer is self.trainer:
            return
        self.trainer = trainer
        if "train" not in vars(trainer):
            trainer.train = self._wrap_train(trainer.train)

    def _wrap_train(self, train: Any) -> Any:
        @functools.wraps(train)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            try:
                return train(*args, **kwargs)
            except BaseException as exc:  # Ctrl-C and SIGTERM's SystemExit too; re-raised unchanged
                self._close(exc)
                raise
            finally:
                self._close(None)

        wrapped.__perf_callbacks__ = True  # type: ignore[attr-defined]
        return wrapped

    def _wrap(self, trainer: Trainer) -> None:
        """Install the per-run wrappers (instance attributes); :meth:`_close` removes them."""
        live = self._live_engine
        for name, wrapper in (("get_batch_samples", _timed_get_batch_samples(live, self._count)),
                              ("evaluate", _around(live, PerfEngine.validation_start, PerfEngine.validation_end)),
                              ("_save_checkpoint", _around(live, PerfEngine.checkpoint_start, PerfEngine.checkpoint_end))):
            if name not in vars(trainer) and hasattr(trainer, name):
                setattr(trainer, name, wrapper(getattr(trainer, name)))
        acc = getattr(trainer, "accelerator", None)
        if acc is not None and "backward" not in vars(acc):
            acc.backward = _around(live, lambda e: e.phase("backward"), PerfEngine.end_phase)(acc.backward)

    def _unwrap(self, trainer: Trainer) -> None:
        for name in _WRAPPED:
            if getattr(vars(trainer).get(name), "__perf_callbacks__", False):
                delattr(trainer, name)
        acc = getattr(trainer, "accelerator", None)
        if acc is not None and getattr(vars(acc).get("backward"), "__perf_callbacks__", False):
            del acc.backward

    def _live_engine(self) -> PerfEngine | None:
        return self.engine if self._live else None

    def _count(self, samples: int) -> None:
        self._samples += samples

    def _check(self, loader: Any, args: TrainingArguments) -> None:
        assert self.engine is not None
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        findings = inspect_accelerate_loader(loader, "train_dataloader", args.world_size, self.engine.cuda, local)
        self.engine.report_findings([_in_training_args_terms(f) for f in findings])

    def _check_ranks(self, args: TrainingArguments) -> None:
        if self.config.ranks is not None and max(self.config.ranks) >= args.world_size:
            raise PerfConfigError(
                f"ranks={list(self.config.ranks)} names ranks beyond the world size {args.world_size}; "
                f"valid ranks are 0-{args.world_size - 1}"
            )

    def _close(self, exc: BaseException | None) -> None:
        """Flush and detach; never raises. Called at train end, on an exception and at interpreter exit."""
        if not self._live:
            return
        self._live = False
        atexit.unregister(self._close)
        if self.engine is not None:
            self.engine.close(exc)
        if self.trainer is not None:
            _quiet(lambda: self._unwrap(self.trainer))  # type: ignore[arg-type]
        if self._sigterm:
            _release_sigterm()
            self._sigterm = False
        if self.metrics is not None:
            _quiet(self.metrics.close)


class _TimedIterator:
    """The Trainer's epoch iterator, with each ``__next__`` (the DataLoader's time alone) timed as data wait."""

    __slots__ = ("_engine", "_it")

    def __init__(self, it: Any, engine: PerfEngine) -> None:
        self._it, self._engine = it, engine

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        self._engine.data_start()
        try:
            return next(self._it)
        finally:
            self._engine.data_end()


def _timed_get_batch_samples(live: Callable[[], PerfEngine | None], count: Callable[[int], None]) -> Any:
    def wrap(get_batch_samples: Any) -> Any:
        @functools.wraps(get_batch_samples)
        def wrapped(epoch_iterator: Any, *args: Any, **kwargs: Any) -> Any:
            engine = live()
            if engine is None:
                return get_batch_samples(epoch_iterator, *args, **kwargs)
            result = get_batch_samples(_TimedIterator(epoch_iterator, engine), *args, **kwargs)
            count(sum(_batch_size(b) or 0 for b in result[0]))
            return result

        wrapped.__perf_callbacks__ = True  # type: ignore[attr-defined]
        return wrapped

    return wrap


def _around(live: Callable[[], PerfEngine | None], enter: Callable[[PerfEngine], None],
            leave: Callable[[PerfEngine], None]) -> Any:
    """Wrap a method in ``enter(engine)`` / ``leave(engine)`` while training runs (a plain call otherwise)."""

    def wrap(method: Any) -> Any:
        @functools.wraps(method)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            engine = live()
            if engine is None:
                return method(*args, **kwargs)
            enter(engine)
            try:
                return method(*args, **kwargs)
            finally:
                leave(engine)

        wrapped.__perf_callbacks__ = True  # type: ignore[attr-defined]
        return wrapped

    return wrap


def _find_trainer(frame: FrameType | None) -> Trainer | None:
    """The Trainer whose method fired the current event: ``self`` of the nearest Trainer frame up the stack."""
    for _ in range(16):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None


def _broadcast_run_name(name: str) -> str:
    """Rank 0's run name on every rank (every rank calls this in ``on_train_begin``)."""
    from accelerate.utils import broadcast_object_list

    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return name
    return str(broadcast_object_list([name])[0])


def _logging_interval(args: TrainingArguments, state: TrainerState) -> int:
    steps = getattr(state, "logging_steps", None) if str(args.logging_strategy) in ("steps", "IntervalStrategy.STEPS") \
        else None
    return max(1, int(steps)) if steps else 50


_ARG_NAMES = re.compile(r"\b(num_workers|pin_memory|persistent_workers)=")


def _in_training_args_terms(finding: Finding) -> Finding:
    """Phrase a DataLoader finding's fix in ``TrainingArguments`` names (``dataloader_num_workers=4``)."""
    message = _ARG_NAMES.sub(r"dataloader_\1=", finding.message)
    message = message.replace("let accelerator.prepare() shard the loader", "let the Trainer shard it")
    return dataclasses.replace(finding, message=message)


def _preempted(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _catch_sigterm() -> bool:
    """SIGTERM raises ``SystemExit(143)`` (so ``train`` flushes the window), if it has its default action."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _preempted)
    return True


def _release_sigterm() -> None:
    if signal.getsignal(signal.SIGTERM) is _preempted:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _batch_size(batch: Any) -> int | None:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, list | tuple) else ()
    return next((n for n in map(_batch_size, values) if n is not None), None)


def _quiet(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - cleanup must never raise
        log.debug("ignored error during close", exc_info=True)

"""Hugging Face ``transformers`` adapter: ``Trainer(callbacks=[TransformersPerfCallback()])``.

The callback maps the Trainer's events onto the engine. The loop of transformers 5.x (and 4.46+) fetches all
micro-batches of an optimizer step first (``Trainer.get_batch_samples``), then calls ``on_step_begin`` once,
``on_substep_end`` after each micro-batch but the last, ``on_pre_optimizer_step``/``on_optimizer_step`` around
``optimizer.step()`` and ``on_step_end`` after it. So a micro-batch starts at ``on_step_begin`` or at the
``on_substep_end`` of the one before, and its step is ``state.global_step``: ``ProfilerStep#N`` is optimizer step N,
with gradient accumulation too, and a resumed run (``global_step`` restored) continues the numbering.

What events cannot show (the data wait inside the DataLoader, backward, evaluation and checkpoint starts, exceptions)
comes from wrapping a few Trainer methods for the duration of the run; see
:mod:`perf_callbacks.integrations._transformers.hooks`. Metrics go through the ``report_to`` integrations; see
:mod:`perf_callbacks.integrations._transformers.metrics`.

Example:
    >>> from perf_callbacks import TransformersPerfCallback
    >>> TransformersPerfCallback(schedule={"skip_first": 5, "active": 2}).config.schedule.active
    2
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from typing_extensions import override

from perf_callbacks.config import PerfConfig, check_ranks
from perf_callbacks.core.engine.engine import PerfEngine, RunContext, now
from perf_callbacks.core.exit import catch_sigterm, release_sigterm
from perf_callbacks.core.files.remote import before_shutdown, join_output, resolve_output
from perf_callbacks.core.files.traces import new_run_name
from perf_callbacks.core.flops.peak import mixed_precision_dtype
from perf_callbacks.core.timing.dataloader import inspect_accelerate_loader
from perf_callbacks.core.timing.fetch_clock import attach
from perf_callbacks.core.warn import quiet, warn_user
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from perf_callbacks.integrations._adapters import FromConfig, distributed_initialized
from perf_callbacks.integrations._transformers import hooks
from perf_callbacks.integrations._transformers.metrics import MetricsRouter

log = logging.getLogger(__name__)


class TransformersPerfCallback(TrainerCallback, FromConfig):
    """Profiler windows by optimizer step, NVTX ranges, memory/timing logs and DataLoader checks for ``Trainer``.

    Takes the same keys as :class:`~perf_callbacks.GPUPerfCallback` (see :class:`~perf_callbacks.PerfConfig`), or a
    ready ``config=PerfConfig(...)``; bad values raise ``PerfConfigError`` here. ``output_dir`` defaults to
    ``<args.output_dir>/perf`` and ``log_every_n_steps`` to the Trainer's ``logging_steps``. Pass it in
    ``Trainer(callbacks=[...])`` so that it can flush the window when ``train()`` raises.

    Example::

        from transformers import Trainer, TrainingArguments
        args = TrainingArguments("out", max_steps=20, gradient_accumulation_steps=3)
        callback = TransformersPerfCallback(schedule={"skip_first": 5, "active": 2})
        Trainer(model, args, train_dataset=dataset, callbacks=[callback]).train()
    """

    def __init__(self, config: PerfConfig | None = None, **options: Any) -> None:
        FromConfig.__init__(self, config, **options)  # self.config; named: TrainerCallback comes first in the MRO
        self.engine: PerfEngine | None = None
        self.trainer: Trainer | None = None
        self.metrics: MetricsRouter | None = None
        self._live = self._sigterm = False
        self._samples = 0
        self._cancel_exit: Callable[[], None] = lambda: None
        self._created = now()  # the ledger's start-up before and after the hook

    # ---- run lifecycle ---------------------------------------------------------------------------------------
    @override
    def on_init_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        self._bind(hooks.find_trainer(sys._getframe(1)))

    @override
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        self._close(None)  # a previous train() call that ended without on_train_end
        trainer = hooks.find_trainer(sys._getframe(1))
        self._bind(trainer)
        check_ranks(self.config.ranks, args.world_size)
        loader = kw.get("train_dataloader")
        output_dir, remote = resolve_output(self.config.output_dir or join_output(args.output_dir or ".", "perf"),
                                            args.process_index)
        ctx = RunContext(
            output_dir=output_dir,
            remote=remote,
            run_name=_broadcast_run_name(new_run_name()),  # every rank calls on_train_begin
            rank=args.process_index,
            world_size=args.world_size,
            device=args.device,
            log_every_n_steps=self.config.log_every_n_steps or _logging_interval(args, state),
            log_min_interval_s=self.config.log_min_interval_s,
            data_loader=("train_dataloader", getattr(loader, "num_workers", None)),
            distributed_initialized=distributed_initialized(),
            advice=_in_training_args_words,
            compute_dtype=mixed_precision_dtype("bf16" if args.bf16 else "fp16" if args.fp16 else None),
            created_at=self._created,
        )
        self.engine = PerfEngine(self.config, ctx)
        quiet(lambda: attach(loader), "timing the workers' fetches")
        if state.is_world_process_zero:
            self.metrics = MetricsRouter(trainer, args, state, control, self.engine.run_dir / "tensorboard",
                                         self.engine.outputs)
            ctx.log_metrics, ctx.log_text = self.metrics.log_metrics, self.metrics.log_text
        if kw.get("model") is not None:
            self.engine.attach_model(kw["model"])
        self.engine.attach_owners(lambda: _owners(self.trainer, kw))
        self.engine.mark_compiled(bool(getattr(args, "torch_compile", False)))  # compiled later: never counted
        self._live, self._samples, self._sigterm = True, 0, catch_sigterm()
        self._cancel_exit = before_shutdown(self._close_at_exit)  # while uploads to an object store still run
        if trainer is not None:
            hooks.install(trainer, self._live_engine, self._count_samples)
        elif state.is_world_process_zero:
            warn_user("could not find the Trainer running this callback: data wait, backward, evaluation and "
                      "checkpoint ranges are off, and metrics go to our own TensorBoard events",
                      InstrumentUnavailableWarning)
        if self.config.check_dataloaders and loader is not None:
            self._check(loader, args)

    @override
    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        self._close(None)

    @override
    def on_epoch_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        if self._live and self.engine is not None:  # the ledger's epoch boundaries (DataLoader worker start-up)
            self.engine.steps.epoch_start(self.engine.state.done, kw.get("train_dataloader"))

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
            self.engine.state.own_code()  # on_step_end's callbacks and the rest, until the next fetch: the user's time

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
            trainer.train = hooks.wrap_train(trainer.train, self._close)  # type: ignore[method-assign]

    def _live_engine(self) -> PerfEngine | None:
        return self.engine if self._live else None

    def _count_samples(self, samples: int) -> None:
        self._samples += samples

    def _check(self, loader: Any, args: TrainingArguments) -> None:
        assert self.engine is not None
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        findings = inspect_accelerate_loader(loader, "train_dataloader", args.world_size, self.engine.cuda, local)
        self.engine.report_findings(findings)  # phrased in TrainingArguments terms by the context's advice

    def _close_at_exit(self) -> None:
        """A run its ``train()`` wrapper never closed: flushed as the interpreter shuts down, with what ends it."""
        engine = self.engine
        self._close(engine.exit_cause() if engine is not None else None)

    def _close(self, exc: BaseException | None) -> None:
        """Flush and detach; never raises. Called at train end, on an exception and at interpreter exit."""
        if not self._live:
            return
        self._live = False
        self._cancel_exit()
        if self.engine is not None:
            self.engine.close(exc)
        trainer = self.trainer
        if trainer is not None:
            quiet(lambda: hooks.uninstall(trainer))
        if self._sigterm:
            release_sigterm()
            self._sigterm = False
        if self.metrics is not None:
            quiet(self.metrics.close)


def _broadcast_run_name(name: str) -> str:
    """Rank 0's run name on every rank (every rank calls this in ``on_train_begin``)."""
    from accelerate.utils import broadcast_object_list

    if not distributed_initialized():
        return name
    return str(broadcast_object_list([name])[0])


def _logging_interval(args: TrainingArguments, state: TrainerState) -> int:
    """The Trainer's logging interval in optimizer steps (``state.logging_steps`` is absolute); 50 when not by steps."""
    steps = getattr(state, "logging_steps", None) if getattr(args.logging_strategy, "value", None) == "steps" else None
    return max(1, int(steps)) if steps else 50


_ARG_NAMES = re.compile(r"\b(num_workers|pin_memory|persistent_workers)=")
_RAISE = re.compile(r"\bnum_workers to (\d+)")  # "raise num_workers to 17"


def _in_training_args_words(message: str) -> str:
    """Phrase a DataLoader warning's fix in ``TrainingArguments`` names (``dataloader_num_workers=4``)."""
    message = _RAISE.sub(r"dataloader_num_workers to \1", _ARG_NAMES.sub(r"dataloader_\1=", message))
    return message.replace("let accelerator.prepare() shard the loader", "let the Trainer shard it")


def _owners(trainer: Trainer | None, kw: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The Trainer's model and optimizer as they are now (its optimizer is made after on_train_begin's arguments)."""
    model = getattr(trainer, "model", None) or kw.get("model")
    optimizer = getattr(trainer, "optimizer", None) or kw.get("optimizer")
    return [model] if model is not None else [], [optimizer] if optimizer is not None else []

"""Model FLOPs per optimizer step and the device's peak: the two numbers behind ``perf/train/tflops`` and MFU.

Where the FLOPs of a step come from, the first that applies:

1. the ``flops_per_step`` config key;
2. a ``flops_per_batch`` attribute on the model (as Lightning's ``ThroughputMonitor`` reads it from the
   LightningModule), times the micro-batches of the first completed step;
3. counted once with :class:`~perf_callbacks.core.flops.count.StepCounter` (``FlopCounterMode``'s formulas, in a
   dispatch mode that only observes: every op runs as it would without us, so the run's weights are bit-identical)
   over one real training step: from the ``batch_start`` of its first micro-batch to the ``batch_end`` that
   completes its optimizer step, so every micro-batch's forward and backward is in it. The step is the first one
   that no profiling window (warm-up included) or Nsight capture touches, step 0 with the default schedule (whose
   time holds one-time costs anyway); it is left out of step time and of the slowdown check, like a profiled step,
   and stands for the data-wait check's warm-up step. It is skipped, with a note that says why, when
   ``flops: false``, when no op with a FLOP formula ran, or when ops ran whose work the count cannot see without
   running them differently: ops that look like matrix math without a formula (an LSTM, a custom attention kernel),
   higher-order operators without one (``torch.cond``, a Triton kernel).

Outside that one step the engine pays one attribute check per micro-batch, and nothing once the FLOPs are known.
The peak comes from :func:`~perf_callbacks.core.flops.peak.peak_flops` for the compute dtype: the one that carried most
of the counted FLOPs, else the adapter's mixed-precision dtype, else the model's parameters' dtype.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.flops.compile_watch import is_compiled
from perf_callbacks.core.flops.count import StepCounter, op_name
from perf_callbacks.core.flops.model_facts import flops_per_batch, param_dtype
from perf_callbacks.core.flops.modules import ModuleOwners
from perf_callbacks.core.flops.peak import dtype_name, peak_flops
from perf_callbacks.core.warn import WarnFn
from perf_callbacks.exceptions import InstrumentUnavailableWarning

log = logging.getLogger(__name__)
META_KEY = "perf_callbacks_flops"
"""The trace's top-level metadata key that carries :meth:`StepFlops.meta` (read back by the analysis)."""
MAX_TRIES = 3  # counting steps abandoned (their optimizer step never completed) before giving up


class StepFlops:
    """Finds the FLOPs per optimizer step of one rank, counts them on one step if it must, and gives the peak.

    Args:
        config: ``flops``, ``flops_per_step``, ``peak_tflops`` and ``nsys_steps`` (the counting step avoids it).
        ctx: the device and the adapter's compute dtype.
        warn: the engine's warn-once.
        compiling: whether torch.compile compiled in this run (the engine's): compiled kernels' FLOPs are not counted.
    """

    def __init__(self, config: PerfConfig, ctx: RunContext, warn: WarnFn,
                 compiling: Callable[[], bool] = lambda: False) -> None:
        self.config, self.ctx, self._warn = config, ctx, warn
        self.per_step: float | None = float(config.flops_per_step) if config.flops_per_step else None
        self.source = "flops_per_step (config)" if self.per_step else ""
        self.note = "" if self.per_step or config.flops else "not measured (flops: false): set flops_per_step"
        self.dtype: torch.dtype | None = None  # measured on the counted step
        self.model: torch.nn.Module | None = None
        self.counted_step: int | None = None  # the step set aside for counting
        self.compiled = False  # the adapter found a compiled model that it does not attach (Accelerate's)
        self.compiling = compiling  # torch.compile compiled in this run (the engine's)
        self.wants_hooks = self.per_step is None  # the engine calls batch_start/batch_end until this is False
        self._per_batch: float | None = None
        self._looked = False  # the model's flops_per_batch attribute was looked up
        self._counter: StepCounter | None = None  # counting now
        self._stale: StepCounter | None = None  # dropped, but another mode above it kept it on the stack
        self._tries = 0
        self._peak: tuple[float | None, str] | None = None
        self.by_op: dict[str, int] = {}  # the counted step's FLOPs by operator, as the trace names it (aten::mm)
        self.by_module: dict[str, int] | None = None  # with module_spans: the counted FLOPs by module path
        self._owners: ModuleOwners | None = None  # module hooks, on the counting step only

    # ---- the engine's hooks, while wants_hooks ------------------------------------------------------------------
    def batch_start(self, step: int, micro: int, profiled: bool) -> bool:
        """A micro-batch of ``step`` starts (``micro`` ran before it in this step); returns whether to keep calling."""
        try:
            return self._batch_start(step, micro, profiled)
        except Exception as err:  # noqa: BLE001 - instrumentation must never break training
            return self._fail(err)

    def batch_end(self, stepped: bool, micro: int) -> bool:
        """A micro-batch ended (``micro`` in the step so far); returns whether to keep calling."""
        try:
            return self._batch_end(stepped, micro)
        except Exception as err:  # noqa: BLE001
            return self._fail(err)

    def close(self) -> None:
        """Training ended: a count still open is dropped (its step never completed) and its mode left."""
        self._owners_off()
        if self._counter is not None:
            self._drop("training ended inside the counting step")
        if self._stale is not None:  # at the end of training, whatever is above it is gone or never will be
            stale, self._stale = self._stale, None
            if not stale.stop():
                log.debug("perf-callbacks: the FLOP counter's mode is not on top of the dispatch stack at close")
        self.wants_hooks = False

    # ---- what the FLOPs give -----------------------------------------------------------------------------------
    def add_metrics(self, metrics: dict[str, float]) -> None:
        """``train/tflops`` and ``train/mfu`` from the interval's median step time (same set-asides)."""
        ms = metrics.get("train/step_time_ms")
        if self.per_step is None or not ms:
            return
        tflops = self.per_step / (ms / 1e3) / 1e12
        metrics["train/tflops"] = tflops
        peak, _ = self.peak()
        if peak:
            metrics["train/mfu"] = tflops * 1e12 / peak

    def peak(self) -> tuple[float | None, str]:
        """The peak FLOP/s and its source (None and why when unknown); looked up once the dtype is settled."""
        if self._peak is not None:
            return self._peak
        value = peak_flops(self.ctx.device, self.compute_dtype(), self.config.peak_tflops)
        if self.per_step is not None or not self.wants_hooks:  # the dtype will not change any more
            self._peak = value
        return value

    def compute_dtype(self) -> torch.dtype:
        """The counted step's dtype, else the adapter's mixed-precision dtype, else the parameters', else float32."""
        if self.dtype is not None:
            return self.dtype
        if self.ctx.compute_dtype is not None:
            return self.ctx.compute_dtype
        return param_dtype(self.model) or torch.float32

    def meta(self) -> dict[str, Any]:
        """What travels in the trace's metadata (``META_KEY``): the FLOPs, their source, the peak and its source."""
        note = self.note
        if self.per_step is None and not note:
            note = "not known yet when this window started: they are counted on the first step outside every " \
                   "window; set flops_per_step, or start the windows later (schedule.skip_first)"
        try:
            peak, peak_source = self.peak()
            dtype = dtype_name(self.compute_dtype())
        except Exception as err:  # noqa: BLE001 - the window's trace goes on without a peak
            peak, peak_source, dtype = None, f"{type(err).__name__}: {err}", "unknown"
        return {"flops_per_step": self.per_step, "source": self.source, "note": note, "dtype": dtype,
                "peak_tflops": None if peak is None else peak / 1e12, "peak_source": peak_source,
                "flops_by_op": dict(self.by_op)}

    def module_flops(self) -> tuple[dict[str, int] | None, str]:
        """The FLOPs counted per module path (``module_spans``), or None and why they are not known."""
        if self.by_module is not None:
            return self.by_module, ""
        if self.per_step is None:
            return None, self.note or "not counted yet when this window started (counted on the first step outside " \
                                      "every window)"
        if not self.source.startswith("counted"):
            return None, f"not counted per module: the FLOPs per step come from {self.source}"
        return None, "not counted per module"

    # ---- internals ------------------------------------------------------------------------------------------------
    def _batch_start(self, step: int, micro: int, profiled: bool) -> bool:
        self._pop_stale()
        if self._counter is not None:
            if step == self.counted_step:
                return True
            self._drop(f"step {self.counted_step} ended without an optimizer step")  # a new step began
        if not self._looked:
            self._looked = True
            self._per_batch = flops_per_batch(
                self.model, lambda msg: self._warn("flops_per_batch", InstrumentUnavailableWarning, msg))
            if self._per_batch is None and (self.compiled or is_compiled(self.model)):
                return self._skip_compiled()
        if self._per_batch is not None:
            return True  # known at the end of the first step: flops_per_batch times its micro-batches
        if not self._can_count():
            return self._stale is not None
        if micro == 0 and not profiled and not self._in_nsys(step):
            self.counted_step, self._counter = step, StepCounter(owner=self._owners_on())
            self._counter.start()
        return True

    def _batch_end(self, stepped: bool, micro: int) -> bool:
        self._pop_stale()
        if self._per_batch is not None and stepped:
            self._known(self._per_batch * micro, f"flops_per_batch {self._per_batch:g} x {micro} micro-batches")
            return self._stale is not None
        counter = self._counter
        if counter is None or not stepped:
            return counter is not None or self._stale is not None or self._can_count()
        self._counter = None
        self._owners_off()
        if not counter.stop():  # another tool's dispatch mode is still open above ours: left at the next hook
            self._stale = counter
            self._tries = MAX_TRIES
            self.note = "not measured: another TorchDispatchMode was entered inside the counting step and left open"
            return True
        if counter.error is not None:  # a formula failed on an op of the step: the step ran all the same
            return self._fail(counter.error)
        if self.compiling():  # compiled kernels bypass the mode: their FLOPs would be missing
            self.note = (f"not measured: torch.compile compiled code in this run (by step {self.counted_step}), "
                         "whose kernels FlopCounterMode does not see: set flops_per_step (or a flops_per_batch "
                         "attribute)")
            self.wants_hooks = False
            return False
        self._finish(counter, micro)
        return False

    def _finish(self, counter: StepCounter, micro: int) -> None:
        if not counter.ops:  # nothing ran through the mode: the step's time is its own, it is not set aside
            self.counted_step = None
        if counter.uncounted:
            ops = ", ".join(f"{name} x{n}" for name, n in counter.uncounted.most_common(3))
            self.note = (f"not measured: ops without a FLOP formula ran in step {self.counted_step} ({ops}); the "
                         "count would miss their work: set flops_per_step (or a flops_per_batch attribute)")
        elif counter.total <= 0:
            self.note = f"not measured: no op with a FLOP formula ran in step {self.counted_step}; set flops_per_step"
        else:
            self.dtype = counter.dtype
            self.by_op = {op_name(op): int(n) for op, n in counter.flops.items() if n}
            if counter.owner is not None:
                self.by_module = {k: v for k, v in counter.by_module.items() if k is not None and v}
            per = f", {micro} micro-batches" if micro > 1 else ""
            self._known(float(counter.total), f"counted with FlopCounterMode on step {self.counted_step}{per}")
            return
        self.wants_hooks = False
        log.info("perf-callbacks: FLOPs per step %s", self.note)

    def _known(self, flops: float, source: str) -> None:
        self.per_step, self.source, self.note, self.wants_hooks = flops, source, "", False
        self._peak = None  # looked up at the next logging interval (our own time, set aside) or window

    def _drop(self, why: str) -> None:
        """The counting step was abandoned: leave the mode (now or, if not on top, at a later hook) and retry."""
        counter, self._counter = self._counter, None
        self._owners_off()
        if counter is not None and not counter.stop():
            self._stale = counter
        self._tries += 1
        self.note = f"not measured: {why}"

    def _pop_stale(self) -> None:
        if self._stale is not None and self._stale.stop():
            self._stale = None

    def _skip_compiled(self) -> bool:
        """A compiled model is not counted: torch never compiles a function first called under a dispatch mode."""
        self._tries, self.wants_hooks = MAX_TRIES, False
        self.note = ("not measured: the model is compiled (torch.compile), and a step run under FlopCounterMode would "
                     "keep torch from ever compiling it (and miss its fused kernels): set flops_per_step (or a "
                     "flops_per_batch attribute)")
        return False

    def _can_count(self) -> bool:
        return self.config.flops and self._tries < MAX_TRIES and self._stale is None

    def _in_nsys(self, step: int) -> bool:
        steps = self.config.nsys_steps
        return steps is not None and steps[0] <= step <= steps[1]

    def _owners_on(self) -> Callable[[], str | None] | None:
        """With ``module_spans``, hooks that tell each op's module, on the model for the counting step only."""
        if not self.config.module_spans or self.model is None:
            return None
        try:
            self._owners = ModuleOwners(self.model)
            self._owners.install()
        except Exception as err:  # noqa: BLE001 - the total is counted all the same
            self._owners = None
            log.debug("perf-callbacks: no FLOPs per module: %s", err)
            return None
        return self._owners.owner

    def _owners_off(self) -> None:
        owners, self._owners = self._owners, None
        if owners is not None:
            owners.remove()

    def _fail(self, err: BaseException) -> bool:
        self._owners_off()
        for counter in (self._counter, self._stale):
            try:
                if counter is not None:
                    counter.stop()
            except Exception:  # noqa: BLE001
                log.debug("could not leave the FLOP counter", exc_info=True)
        self._counter = self._stale = None
        self._tries, self.wants_hooks = MAX_TRIES, False
        self.note = f"not measured: {type(err).__name__}: {err}"
        rank = f" on rank {self.ctx.rank}" if self.ctx.world_size > 1 else ""
        self._warn("disabled:flops", InstrumentUnavailableWarning,
                   f"FLOP counting disabled{rank}: {type(err).__name__}: {err}; training continues (set "
                   "flops_per_step for TFLOP/s and MFU)", False)
        return False


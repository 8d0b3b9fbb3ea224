"""The loop's own code, as the hang watchdog tells it from a step's work (``core/hang/watchdog.py``).

A step's work (its data fetch, forward, backward and optimizer step) gets ``hang_timeout``; the loop's own code gets
``ASIDE_FACTOR`` times as long. The adapters mark the own code in the engine's step state
(:meth:`~perf_callbacks.core.engine.step_state.StepState.own_code`), and the engine clears the mark when the next step
opens:

- after a step's optimizer step completed (:func:`mark_after_steps`: torch's step post hooks, where the framework has
  no event of its own right after it), until the next step opens: the framework's callbacks after the step, an
  evaluation of the user's own, a ``break`` out of the loop;
- where the adapter cannot tell the user's code from the step's forward (Accelerate: from the batch's hand-over to
  the step's first phase), the watchdog reads the training thread's stack once the timeout has passed
  (:func:`in_training_forward`): inside a module in training mode it is the step's forward, else the user's code.

Nothing here runs on the training thread but the post hook, which writes one attribute.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["AFTER_STEP", "MAYBE", "in_training_forward", "mark_after_steps"]
log = logging.getLogger(__name__)
AFTER_STEP = "after step"  # the step's optimizer step completed: the loop's own code runs until the next step opens
MAYBE = "maybe"  # the loop's own code or the step's forward (the adapter cannot tell): the stack says which


def in_training_forward(ident: int) -> bool:
    """Whether the thread ``ident`` is inside the call of a ``torch.nn.Module`` in training mode right now.

    A module in eval mode (an evaluation's ``model.eval()``) and code outside any module are not: the user's own code.
    """
    module = sys.modules.get("torch.nn.modules.module")
    calls = getattr(module, "Module", None)
    if calls is None:
        return False
    codes = {getattr(calls, name).__code__ for name in ("_call_impl", "_wrapped_call_impl") if hasattr(calls, name)}
    frame = sys._current_frames().get(ident)
    while frame is not None:
        if frame.f_code in codes and getattr(frame.f_locals.get("self"), "training", False) is True:
            return True
        frame = frame.f_back
    return False


def mark_after_steps(state: Any, optimizers: Iterable[Any]) -> list[Callable[[], None]]:
    """Mark the loop's own code in ``state`` (the engine's ``StepState``) after each step of ``optimizers``.

    ``optimizers``: torch optimizers, or wrappers holding one as ``optimizer``. Returns the functions that take the
    hooks off. An optimizer without step hooks is left alone (its steps keep the step's timeout until the step ends).
    """

    def hook(*args: Any) -> None:  # (optimizer, args, kwargs): one attribute written, no further call
        state.own = AFTER_STEP

    removers: list[Callable[[], None]] = []
    for opt in optimizers:
        inner = getattr(opt, "optimizer", opt)
        register = getattr(inner, "register_step_post_hook", None)
        if register is None:
            continue
        try:
            removers.append(register(hook).remove)
        except Exception:  # noqa: BLE001 - an optimizer that refuses hooks keeps the step's timeout
            log.debug("perf-callbacks: no step post hook on %s", type(inner).__name__, exc_info=True)
    return removers

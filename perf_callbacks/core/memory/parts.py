"""What the live process knows exactly of its memory: the bytes of parameters, gradients and optimizer state.

The adapters hand over where the models and optimizers are (:data:`Owners`, a callable, so that a model or an
optimizer prepared later is still found); this module measures. Tensors are counted by their storage, once per
storage (tied weights, views and an optimizer state that shares a parameter's storage count once, in the first part
that holds them), and only those on the measured device type: on CUDA, Adam's ``step`` counters on the host are no
device memory.

It is read at a window's start and end (never per step) and when a rank runs out of memory. At the window's start
the tensors are remembered by weak reference: at its end the bytes held by tensors that lived through the whole
window (``resident``) tell the analysis what was allocated before the trace began, and the gradients allocated
again inside it (``zero_grad(set_to_none=True)``) apart from those kept.

Example:
    >>> import torch
    >>> model = torch.nn.Linear(4, 2)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> model(torch.ones(3, 4)).sum().backward(); opt.step()
    >>> measure([model], [opt], "cpu")
    {'parameters': 40, 'gradients': 40, 'optimizer_state': 40}
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

META_KEY = "perf_callbacks_memory"
"""The trace's top-level metadata key (``perf_callbacks.analysis.memory.parts.META_KEY``)."""
PARTS = ("parameters", "gradients", "optimizer_state")

Owners = Callable[[], tuple[list[Any], list[Any]]]
"""Returns ``(models, optimizers)`` of the run as they are now (framework wrappers are unwrapped here)."""


def measure(models: Iterable[Any], optimizers: Iterable[Any], device_type: str) -> dict[str, int]:
    """``{parameters, gradients, optimizer_state}`` in bytes: each storage once, on ``device_type`` only."""
    seen: set[tuple[str, int]] = set()
    out = dict.fromkeys(PARTS, 0)
    for part, tensors in _parts(list(models), list(optimizers)):
        for t in tensors:
            out[part] += _new_bytes(t, device_type, seen)
    return out


class WindowParts:
    """The parts at a window's end, and what of them lived through the whole window.

    Gradients are also read when the window's first optimizer step begins (:meth:`optimizer_step`): a loop that calls
    ``zero_grad()`` after ``step()`` has none left at the window's end.

    Args:
        owners: the run's models and optimizers.
        device_type: ``cuda`` or ``cpu``: the memory measured.
        capacity: the device's total memory in bytes (None: unknown, e.g. the host); the report's advice needs it.
    """

    def __init__(self, owners: Owners, device_type: str, capacity: int | None = None) -> None:
        self.owners, self.device_type, self.capacity = owners, device_type, capacity
        self._start: dict[int, weakref.ref[torch.Tensor]] = {}  # by id: a tensor's == is elementwise
        self._grads = (0, 0)  # the gradient bytes at the window's first optimizer step, and of them new
        self.grads_read = False  # at this window's first optimizer step: once a window (the same tensors every step)

    def start(self) -> None:
        """Remember the tensors alive at the window's start."""
        models, optimizers = self.owners()
        self._start = {id(t): weakref.ref(t) for _, ts in _parts(models, optimizers) for t in ts}
        self._grads, self.grads_read = (0, 0), False

    def optimizer_step(self) -> None:
        """The window's first optimizer step begins: every gradient exists now (``zero_grad`` may free them later)."""
        self.grads_read = True
        models, _ = self.owners()
        seen: set[tuple[str, int]] = set()
        grads = [p.grad for p in (p for m in models for p in _parameters(m)) if p.grad is not None]
        total = new = 0
        for g in grads:
            n = _new_bytes(g, self.device_type, seen)
            total += n
            new += 0 if self._kept(g) else n
        self._grads = (total, new)

    def meta(self) -> dict[str, Any]:
        """The trace metadata entry: the parts at the window's end, ``resident`` and ``new_gradients`` (bytes)."""
        models, optimizers = self.owners()
        parts = measure(models, optimizers, self.device_type)
        seen: set[tuple[str, int]] = set()
        resident = new_grads = 0
        for part, tensors in _parts(models, optimizers):
            for t in tensors:
                n = _new_bytes(t, self.device_type, seen)
                if self._kept(t):
                    resident += n
                elif part == "gradients":
                    new_grads += n
        if self._grads[0] > parts["gradients"]:  # freed by zero_grad after the last optimizer step
            parts["gradients"], new_grads = self._grads
        return {**parts, "resident": resident, "new_gradients": new_grads, "device": self.device_type,
                "capacity": self.capacity}

    def _kept(self, t: torch.Tensor) -> bool:
        """Whether ``t`` was alive at the window's start."""
        ref = self._start.get(id(t))
        return ref is not None and ref() is t


def device_capacity(device: torch.device | None) -> int | None:
    """The total memory of a CUDA device, None for the host or when it cannot be read."""
    if device is None or device.type != "cuda":
        return None
    try:
        index = device.index if device.index is not None else torch.cuda.current_device()
        return int(torch.cuda.get_device_properties(index).total_memory)
    except Exception:  # noqa: BLE001 - a figure for advice, never a failure
        return None


def _parts(models: list[Any], optimizers: list[Any]) -> Iterator[tuple[str, list[torch.Tensor]]]:
    params = [p for m in models for p in _parameters(m)]
    yield "parameters", params
    yield "gradients", [p.grad for p in params if p.grad is not None]
    yield "optimizer_state", [t for o in optimizers for t in _state_tensors(o)]


def _parameters(model: Any) -> list[torch.Tensor]:
    params = getattr(model, "parameters", None)  # a DDP wrapper yields its module's parameters
    return list(params()) if callable(params) else []


def _state_tensors(optimizer: Any) -> list[torch.Tensor]:
    inner = getattr(optimizer, "optimizer", optimizer)  # AcceleratedOptimizer, Lightning's wrappers
    state = getattr(inner, "state", None)
    if not isinstance(state, dict):
        return []
    return [v for s in state.values() if isinstance(s, dict) for v in s.values() if isinstance(v, torch.Tensor)]


def _new_bytes(t: torch.Tensor, device_type: str, seen: set[tuple[str, int]]) -> int:
    if t.device.type != device_type:
        return 0
    storage = t.untyped_storage()
    key = (str(t.device), storage.data_ptr())
    if key in seen or storage.data_ptr() == 0:
        return 0
    seen.add(key)
    return int(storage.nbytes())

"""Which module an op of the FLOP-counting step belongs to, forward and backward, for the FLOPs per module.

Only with ``module_spans``, and only on the one step that ``core/flops/step.py`` counts (already left out of step time):
a forward pre-hook and a forward hook on every submodule of the model (never a global hook) keep the stack of
modules running, and note the autograd sequence numbers each module's forward handed out. In the backward, the
op's autograd node (``torch._C._current_autograd_node()``) carries the sequence number of the forward op it
differentiates, so its FLOPs go to the innermost module whose forward created that node: the same module tree as
``FlopCounterMode``'s, without its global hooks or the extra autograd nodes of ``register_full_backward_hook``.
:meth:`ModuleOwners.remove` takes every hook off at the end of the step.

Example:
    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    >>> owners = ModuleOwners(model); owners.install()
    >>> seen = []
    >>> _ = model[0].register_forward_pre_hook(lambda m, a: seen.append(owners.owner()))  # runs after ours
    >>> _ = model(torch.zeros(1, 2)); owners.remove()
    >>> seen, owners.installed
    (['0'], False)
"""

from __future__ import annotations

from typing import Any

import torch

from perf_callbacks.core.module_spans import module_paths

_NO_SEQ = 2**64 - 1  # the sequence number of nodes that have none (AccumulateGrad)
_SEQ: Any = getattr(torch._C._autograd, "_get_sequence_nr", None)
_NODE: Any = getattr(torch._C, "_current_autograd_node", None)


class ModuleOwners:
    """The module path each op belongs to while one step runs; hooks on ``model`` between install and remove.

    Args:
        model: the model whose modules own the ops.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.stack: list[tuple[str, int]] = []  # (path, the sequence number at its forward's start)
        self.by_seq: dict[int, str] = {}  # autograd sequence number -> the innermost module that created the node
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    @property
    def installed(self) -> bool:
        """Whether hooks are on the model."""
        return bool(self._handles)

    def install(self) -> None:
        """Add the two forward hooks to every module of the model (raises where this torch cannot tell owners)."""
        self.remove()
        if _SEQ is None or _NODE is None:
            raise RuntimeError("this torch has no autograd sequence numbers to tell the backward's modules")
        try:
            for path, module in module_paths(self.model):
                self._handles.append(module.register_forward_pre_hook(self._pre(path)))
                self._handles.append(module.register_forward_hook(self._post, always_call=True))
        except Exception:
            self.remove()
            raise

    def remove(self) -> None:
        """Take every hook off."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.stack.clear()

    def owner(self) -> str | None:
        """The path of the module running now (in the backward: whose forward made the node), None outside all.

        Never raises: an op whose module cannot be told is counted outside every module.
        """
        try:
            node = _NODE()
            if node is not None:
                seq = node._sequence_nr()
                return None if seq == _NO_SEQ else self.by_seq.get(seq)
            return self.stack[-1][0] if self.stack else None
        except Exception:  # noqa: BLE001 - the total is counted all the same
            return None

    def _pre(self, path: str) -> Any:
        def hook(module: torch.nn.Module, args: Any) -> None:
            self.stack.append((path, _SEQ()))

        return hook

    def _post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self.stack:
            return
        path, start = self.stack.pop()
        for seq in range(start, _SEQ()):  # inner modules closed first: theirs stay
            self.by_seq.setdefault(seq, path)

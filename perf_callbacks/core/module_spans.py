"""What module spans (``module_spans``) name and write: each module's path, its parameters, and the trace metadata.

A module's path is its qualified name in the model with the wrappers' own segments left out (FSDP's
``_fsdp_wrapped_module``, activation checkpointing's ``_checkpoint_wrapped_module``, ``torch.compile``'s ``_orig_mod``,
and the leading ``module`` of a ``DistributedDataParallel``/``DataParallel`` root), so that ``blocks.0.attn`` reads the
same however the model is wrapped. The root is the empty path. Spans in the torch trace are named
``perf_callbacks.module/<path>``; the analysis (``analysis/compute/modules.py``) reads them back, with the metadata
:func:`modules_meta` writes under ``META_KEY``: the parameters each module holds itself, the FLOPs counted per module
(``core/flops/modules.py``), and whether spans were recorded.

Example:
    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU())
    >>> [path for path, _ in module_paths(model)]
    ['', '0', '1']
    >>> param_counts(model)
    {'0': 9}
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

SPAN_PREFIX = "perf_callbacks.module/"
"""The name of a module's span in the torch trace is this prefix and the module's path."""
META_KEY = "perf_callbacks_modules"
"""The trace's top-level metadata key (``perf_callbacks.analysis.compute.modules.META_KEY``)."""
WRAPPER_SEGMENTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})
_DATA_PARALLEL = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)


def module_paths(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """Each module of ``model`` once, with its path (wrapper segments left out; the root is ``""``)."""
    unwrap = isinstance(model, _DATA_PARALLEL)
    for name, module in model.named_modules():
        yield path_of(name, unwrap), module


def path_of(name: str, data_parallel_root: bool = False) -> str:
    """A qualified module name without wrapper segments (``module.`` first too, under a data-parallel root).

    Example:
        >>> path_of("layers.0._fsdp_wrapped_module.attn"), path_of("module.blocks.1", True)
        ('layers.0.attn', 'blocks.1')
    """
    parts = [p for p in name.split(".") if p and p not in WRAPPER_SEGMENTS]
    if data_parallel_root and parts and parts[0] == "module":
        parts = parts[1:]
    return ".".join(parts)


def param_counts(model: torch.nn.Module) -> dict[str, int]:
    """Elements of the parameters each module holds itself (not its children's), by path; a shared one counted once."""
    out: dict[str, int] = {}
    seen: set[int] = set()
    for path, module in module_paths(model):
        for p in module.parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                out[path] = out.get(path, 0) + p.numel()
    return out


def modules_meta(model: torch.nn.Module | None, spans: bool, note: str, flops: dict[str, int] | None,
                 flops_note: str) -> dict[str, Any]:
    """What travels in the trace's metadata under ``META_KEY``.

    Args:
        model: the model the spans are on (None: no parameters known).
        spans: whether module spans are recorded in this window.
        note: why they are not, when they are not.
        flops: FLOPs counted per module path (forward and backward) on the counting step; None when not counted.
        flops_note: why they were not counted.
    """
    return {"spans": spans, "note": note, "root": type(model).__name__ if model is not None else "",
            "params": param_counts(model) if model is not None else {},
            "flops": dict(flops) if flops is not None else None, "flops_note": flops_note}

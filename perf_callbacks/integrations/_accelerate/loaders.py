"""The DataLoaders the Accelerate hook sees, named as the user knows them, and their checks (once per loader)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from perf_callbacks.core.timing.dataloader import Finding, inspect_accelerate_loader

if TYPE_CHECKING:
    from accelerate import Accelerator

    from perf_callbacks.core.engine.engine import PerfEngine


def loader_name(acc: Accelerator, loader: Any) -> str:
    """The name of ``loader`` in messages.

    ``prepared DataLoader #i`` for the i-th loader that ``accelerator.prepare`` returned, else the loader passed to
    ``hook.iter()``.
    """
    index = next((i for i, dl in enumerate(acc._dataloaders) if dl is loader), None)
    return f"prepared DataLoader #{index}" if index is not None else "the DataLoader passed to hook.iter()"


def check_loaders(engine: PerfEngine, acc: Accelerator, loaders: list[tuple[str, Any]], checked: set[int]) -> None:
    """Report the findings of each ``(name, loader)`` not checked yet; ``checked`` holds the ids of those that were."""
    findings: list[Finding] = []
    for name, loader in loaders:
        if id(loader) not in checked:
            checked.add(id(loader))
            local = int(os.environ.get("LOCAL_WORLD_SIZE", acc.num_processes))
            findings += inspect_accelerate_loader(loader, name, acc.num_processes, engine.cuda, local)
    engine.report_findings(findings)

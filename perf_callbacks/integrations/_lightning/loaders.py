"""The Trainer's training DataLoaders, named as the user wrote them, and their checks when training starts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import lightning.pytorch as pl

from perf_callbacks.core.engine.engine import PerfEngine
from perf_callbacks.core.timing.dataloader import Finding, inspect_loader
from perf_callbacks.core.timing.fetch_clock import attach
from perf_callbacks.core.warn import quiet


def check_train_loaders(trainer: pl.Trainer, engine: PerfEngine, check: bool) -> None:
    """Name the first training loader for the data-wait message; with ``check``, report the loaders' findings."""
    loaders = train_loaders(trainer.train_dataloader)
    engine.ctx.local_world_size = trainer.num_devices
    if loaders:
        name, first = loaders[0]
        engine.ctx.data_loader = (name, getattr(first, "num_workers", None))
        quiet(lambda: attach(first), "timing the workers' fetches")
    if not check:
        return
    findings: list[Finding] = []
    for name, loader in loaders:
        findings += inspect_loader(
            loader, name, world_size=trainer.world_size, cuda=engine.cuda, local_world_size=trainer.num_devices
        )
    if not trainer._accelerator_connector.use_distributed_sampler:
        findings = [_blame_flag(f) for f in findings]
    engine.report_findings(findings)


def train_loaders(loaders: Any, name: str = "train_dataloader") -> list[tuple[str, Any]]:
    """``(name, loader)`` for each loader in a loader, a list/tuple or a dict of them (nested too)."""
    if isinstance(loaders, dict):
        return [pair for k, v in loaders.items() for pair in train_loaders(v, f"{name}[{k!r}]")]
    if isinstance(loaders, list | tuple):
        return [pair for i, v in enumerate(loaders) for pair in train_loaders(v, f"{name}[{i}]")]
    return [(name, loaders)] if loaders is not None else []


def _blame_flag(finding: Finding) -> Finding:
    if finding.code != "not_sharded":
        return finding
    return replace(finding, message=finding.message + " (the Trainer has use_distributed_sampler=False)")

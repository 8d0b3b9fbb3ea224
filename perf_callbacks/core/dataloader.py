"""Inspects DataLoaders and returns findings (data); the adapters decide how to warn.

Checks: ``num_workers == 0`` (with a suggested value), ``pin_memory=False`` when training on CUDA, and, with more than
one rank, a loader that is not sharded (no ``DistributedSampler``; an ``IterableDataset`` with no sign of sharding).

Example:
    >>> from torch.utils.data import DataLoader
    >>> [f.code for f in inspect_loader(DataLoader(list(range(8))), "train_dataloader", world_size=1, cuda=False)]
    ['num_workers']
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data.distributed import DistributedSampler

#: attributes that show an IterableDataset splits its stream by rank (ours, HF datasets, webdataset, torchdata...)
_SHARD_MARKERS = ("rank", "world_size", "num_shards", "shard_id", "process_index", "num_processes", "_distributed")


@dataclass(frozen=True)
class Finding:
    """One problem found in a loader.

    Args:
        code: ``num_workers``, ``pin_memory``, ``not_sharded``, ``double_sharded`` or ``data_wait``.
        loader: the loader's name, e.g. ``train_dataloader``.
        message: evidence and fix, ready to show a user.
    """

    code: str
    loader: str
    message: str


def suggest_num_workers(local_world_size: int = 1) -> int:
    """A starting value for ``num_workers``: the CPUs available to this process split across local ranks, capped at 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus // max(1, local_world_size)))


def inspect_loader(
    loader: Any, name: str, world_size: int, cuda: bool, local_world_size: int = 1, sharded_by_framework: bool = False
) -> list[Finding]:
    """Check one loader; ``sharded_by_framework`` is True when the framework shards it itself (Accelerate)."""
    if not isinstance(loader, DataLoader):
        return []
    findings = []
    if loader.num_workers == 0:
        n = suggest_num_workers(local_world_size)
        findings.append(
            Finding(
                "num_workers",
                name,
                f"{name} has num_workers=0: batches are loaded in the training process, between steps, while the "
                f"device waits; try num_workers={n} (and persistent_workers=True)",
            )
        )
    if cuda and not loader.pin_memory:
        findings.append(
            Finding(
                "pin_memory",
                name,
                f"{name} has pin_memory=False while training on CUDA: host-to-device copies come from pageable "
                "memory and cannot overlap with compute; set pin_memory=True",
            )
        )
    if world_size > 1 and not sharded_by_framework:
        reason = unsharded_reason(loader)
        if reason:
            findings.append(
                Finding(
                    "not_sharded",
                    name,
                    f"{name} is not sharded across the {world_size} ranks ({reason}): every rank trains on the same "
                    "samples, so an epoch does world_size times the work; use a DistributedSampler (Lightning: keep "
                    "use_distributed_sampler=True) or shard the IterableDataset by rank",
                )
            )
    return findings


def unsharded_reason(loader: DataLoader[Any]) -> str | None:
    """Why ``loader`` looks unsharded across ranks, or None when it is sharded (or we cannot tell)."""
    dataset = loader.dataset
    if isinstance(dataset, IterableDataset):
        if any(hasattr(dataset, attr) for attr in _SHARD_MARKERS):
            return None
        return f"IterableDataset {type(dataset).__name__} has no rank/world_size/shard attribute"
    sampler = find_sampler(loader)
    if isinstance(sampler, DistributedSampler):
        return None
    return f"its sampler is {type(sampler).__name__}, not a DistributedSampler"


def find_sampler(loader: DataLoader[Any]) -> Any:
    """The index sampler under ``loader``'s batch sampler (which is where Lightning puts its DistributedSampler)."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    inner = getattr(batch_sampler, "sampler", None)
    return inner if inner is not None else getattr(loader, "sampler", None)


def data_wait_finding(name: str, share: float, first: int, last: int, num_workers: int | None) -> Finding:
    """The measured check: data wait took ``share`` of step time over steps ``first``..``last``."""
    workers = f" has num_workers={num_workers};" if num_workers is not None else ":"
    hint = f"try num_workers={suggest_num_workers()}" if num_workers == 0 else "add workers or make __getitem__ cheaper"
    return Finding(
        "data_wait",
        name,
        f"{name}{workers} data loading took {share:.0%} of step time over steps {first}-{last}; {hint}",
    )

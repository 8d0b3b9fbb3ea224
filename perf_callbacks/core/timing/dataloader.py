"""Inspects DataLoaders and returns findings (data); the adapters decide how to warn.

Checks: ``num_workers == 0`` (with a suggested value), ``pin_memory=False`` when training on CUDA, and, with more than
one rank, a loader that is not sharded (no ``DistributedSampler``; an ``IterableDataset`` with no sign of sharding).

Under Accelerate (:func:`inspect_accelerate_loader`) the sharding checks change: Accelerate never uses a
``DistributedSampler``; it shards with ``BatchSamplerShard``, ``IterableDatasetShard``, ``DataLoaderDispatcher`` or
``datasets.IterableDataset.shard``. Those are recognised by class name and attributes (accelerate is never imported
here), and a user's own ``DistributedSampler`` underneath them is reported as *double sharding*.

Example:
    >>> from torch.utils.data import DataLoader
    >>> [f.code for f in inspect_loader(DataLoader(list(range(8))), "train_dataloader", world_size=1, cuda=False)]
    ['num_workers']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, SubsetRandomSampler, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler

from perf_callbacks.analysis.judge.advice import (
    LoaderEvidence,
    available_cpus,
    loader_fix,
    measured_fix,
    ranks_on_machine,
    suggest_num_workers,
)

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
        if any(getattr(dataset, attr, None) is not None for attr in _SHARD_MARKERS):
            return None
        return f"IterableDataset {type(dataset).__name__} has no rank/world_size/shard attribute"
    sampler = find_sampler(loader)
    if isinstance(sampler, DistributedSampler):
        return None
    return f"its sampler is {type(sampler).__name__}, not a DistributedSampler"


def find_sampler(loader: DataLoader[Any]) -> Any:
    """Return the index sampler under ``loader``'s batch sampler (where Lightning puts its DistributedSampler)."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    inner = getattr(batch_sampler, "sampler", None)
    return inner if inner is not None else getattr(loader, "sampler", None)


def inspect_accelerate_loader(
    loader: Any, name: str, num_processes: int, cuda: bool, local_world_size: int = 1
) -> list[Finding]:
    """Check one loader of an Accelerate run: settings, then sharding as Accelerate does it.

    A prepared loader (``DataLoaderShard``, ``DataLoaderDispatcher``, ``SkipDataLoader``) is checked for *double*
    sharding; a loader that did not go through ``accelerator.prepare()`` is checked for missing sharding.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> [f.code for f in inspect_accelerate_loader(DataLoader(range(64), num_workers=2), "dl", 2, cuda=False)]
        ['not_sharded']
    """
    base = getattr(loader, "base_dataloader", loader)
    findings = inspect_loader(base, name, num_processes, cuda, local_world_size, sharded_by_framework=True)
    if num_processes <= 1 or not isinstance(base, DataLoader):
        return findings
    how = accelerate_sharding(loader)
    if how is None:
        reason = unsharded_reason(base)
        if reason:
            findings.append(Finding("not_sharded", name, _not_sharded_message(name, num_processes, reason, loader)))
        return findings
    evidence = double_sharding_evidence(loader, num_processes)
    if evidence:
        findings.append(
            Finding(
                "double_sharded",
                name,
                f"{name} is sharded twice: Accelerate shards it ({how}) and {'; '.join(evidence)}. Each rank trains "
                "on a fraction of its share and the epoch silently shrinks; remove your own sharding (e.g. the "
                "DistributedSampler: use shuffle=True instead) and let accelerator.prepare() shard the loader",
            )
        )
    return findings


def accelerate_sharding(loader: Any) -> str | None:
    """How Accelerate shards ``loader`` (a short description), or None when it does not."""
    if _class_name(loader) == "DataLoaderDispatcher":
        return "DataLoaderDispatcher: process 0 loads and dispatches slices"
    base = getattr(loader, "base_dataloader", None)
    if base is None:  # not prepared by Accelerate
        return None
    shard = _find_in_chain(base, "BatchSamplerShard")
    if shard is not None and getattr(shard, "num_processes", 1) > 1:
        return f"BatchSamplerShard(num_processes={shard.num_processes})"
    dataset: Any = getattr(base, "dataset", None)
    if _class_name(dataset) == "IterableDatasetShard" and getattr(dataset, "num_processes", 1) > 1:
        return f"IterableDatasetShard(num_processes={dataset.num_processes})"
    if _is_hf_iterable(dataset):
        return "datasets.IterableDataset.shard"
    return None


def double_sharding_evidence(loader: Any, num_processes: int) -> list[str]:
    """Signs that a loader Accelerate shards is also sharded by the user; empty when there are none."""
    base = getattr(loader, "base_dataloader", loader)
    evidence = []
    for obj in _sampler_chain(base):
        replicas = getattr(obj, "num_replicas", 1)
        if any("Distributed" in c.__name__ for c in type(obj).__mro__) and isinstance(replicas, int) and replicas > 1:
            evidence.append(f"its batch sampler wraps a {type(obj).__name__}(num_replicas={replicas})")
    inner = getattr(getattr(base, "dataset", None), "dataset", getattr(base, "dataset", None))
    if _is_hf_iterable(inner) and getattr(inner, "_distributed", None) is not None:
        evidence.append("its datasets.IterableDataset was already split with split_dataset_by_node")
    lengths = _length_check(loader, base, num_processes)
    if lengths is not None:
        evidence.append(lengths)
    return evidence


def _length_check(loader: Any, base: Any, num_processes: int) -> str | None:
    # The shard's own length is a full epoch on this rank, even when skip_first_batches wraps it (resume mid-epoch);
    # with drop_last (or uneven batches) Accelerate rounds down, so the expected count does too.
    shard = _find_in_chain(base, "BatchSamplerShard")
    if shard is None:
        return None
    try:
        batches, left, samples = len(shard), len(loader), len(base.dataset)
    except TypeError:
        return None
    innermost = _sampler_chain(base)[-1]
    if isinstance(innermost, WeightedRandomSampler | SubsetRandomSampler):  # sized on purpose: they cover less
        samples = len(innermost)
    size = getattr(shard, "batch_size", None)
    if not size:
        return None
    split = getattr(shard, "split_batches", False)
    global_batch = size if split else size * num_processes
    down = getattr(shard, "drop_last", False) or not (split or getattr(shard, "even_batches", True))
    expected = samples // global_batch if down else math.ceil(samples / global_batch)
    if batches >= 0.75 * expected:
        return None
    skipped = f" ({left} left after skipping the first ones)" if left != batches else ""
    return (
        f"len(loader) is {batches} batches per epoch{skipped} where about {expected} are expected "
        f"({'floor' if down else 'ceil'}({samples} samples / {global_batch} per global batch))"
    )


def _not_sharded_message(name: str, num_processes: int, reason: str, loader: Any) -> str:
    prepared = getattr(loader, "base_dataloader", None) is not None
    fix = (
        "Accelerate did not shard it; check the DataLoaderConfiguration and the device mesh"
        if prepared
        else "pass it through accelerator.prepare(), which shards it (do not add a DistributedSampler as well)"
    )
    return (
        f"{name} is not sharded across the {num_processes} processes ({reason}): every rank trains on the same "
        f"samples, so an epoch does num_processes times the work; {fix}"
    )


def _sampler_chain(base: Any) -> list[Any]:
    """Return the batch sampler and the samplers it wraps, outermost first (``batch_sampler``/``sampler``)."""
    chain: list[Any] = []
    todo = [getattr(base, "batch_sampler", None), getattr(base, "sampler", None)]
    while todo and len(chain) < 16:
        obj = todo.pop(0)
        if obj is None or any(obj is seen for seen in chain):
            continue
        chain.append(obj)
        todo += [getattr(obj, "batch_sampler", None), getattr(obj, "sampler", None)]
    return chain


def _find_in_chain(base: Any, class_name: str) -> Any:
    return next((obj for obj in _sampler_chain(base) if _class_name(obj) == class_name), None)


def _class_name(obj: Any) -> str:
    return type(obj).__name__  # type(), not __class__: Accelerate's adapters report DataLoader as __class__


def _is_hf_iterable(dataset: Any) -> bool:
    cls = type(dataset)
    return cls.__name__ == "IterableDataset" and cls.__module__.startswith("datasets.")


def data_wait_finding(name: str, share: float, first: int, last: int, num_workers: int | None,
                      local_world_size: int | None = None, evidence: LoaderEvidence | None = None) -> Finding:
    """Build the measured finding: data wait took ``share`` of step time over steps ``first``..``last``.

    The fix fits the machine: no more workers when ``num_workers`` already uses every CPU core of this rank. With the
    workers' load measured (``evidence``), it fits what they did: more workers for workers that wait (even beyond the
    cores), none for workers busy on every core (:func:`perf_callbacks.analysis.judge.advice.measured_fix`).
    """
    workers = f" has num_workers={num_workers};" if num_workers is not None else ":"
    cores = max(1, available_cpus() // (local_world_size or ranks_on_machine()))
    hint = measured_fix(evidence) if evidence is not None else loader_fix(num_workers, cores)
    return Finding(
        "data_wait",
        name,
        f"{name}{workers} data loading took {share:.0%} of step time over steps {first}-{last}; {hint}",
    )

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from accelerate.data_loader import prepare_data_loader  # a test dependency; the core never imports it
from torch.utils.data import DataLoader, IterableDataset, Sampler, TensorDataset, WeightedRandomSampler
from torch.utils.data.distributed import DistributedSampler

from perf_callbacks.analysis.judge.advice import available_cpus
from perf_callbacks.core.timing.dataloader import (
    accelerate_sharding,
    data_wait_finding,
    double_sharding_evidence,
    inspect_accelerate_loader,
    inspect_loader,
    suggest_num_workers,
    unsharded_reason,
)

DATA = TensorDataset(torch.arange(64.0).unsqueeze(1))


def codes(findings: list[Any]) -> list[str]:
    return [f.code for f in findings]


class Stream(IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[int]:
        yield from range(64)


class RankStream(Stream):
    def __init__(self) -> None:
        self.rank, self.world_size = 0, 2


class EveryOther(Sampler[int]):
    """Shards by rank without 'Distributed' in its name: only the length check can see it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        return iter(range(0, self.n, 2))

    def __len__(self) -> int:
        return self.n // 2


# ---- the plain checks (Lightning and unprepared loaders) -------------------------------------------------------------
def test_num_workers_zero_suggests_a_value() -> None:
    (f,) = inspect_loader(DataLoader(DATA), "train_dataloader", world_size=1, cuda=False)
    assert f.code == "num_workers" and f"num_workers={suggest_num_workers()}" in f.message


def test_pin_memory_only_on_cuda() -> None:
    dl = DataLoader(DATA, num_workers=2)
    assert inspect_loader(dl, "dl", world_size=1, cuda=False) == []
    assert codes(inspect_loader(dl, "dl", world_size=1, cuda=True)) == ["pin_memory"]


def test_not_sharded_without_distributed_sampler() -> None:
    plain = DataLoader(DATA, num_workers=2)
    sharded = DataLoader(DATA, num_workers=2, sampler=DistributedSampler(DATA, num_replicas=2, rank=0))
    assert codes(inspect_loader(plain, "dl", world_size=2, cuda=False)) == ["not_sharded"]
    assert inspect_loader(sharded, "dl", world_size=2, cuda=False) == []
    assert inspect_loader(plain, "dl", world_size=2, cuda=False, sharded_by_framework=True) == []


def test_iterable_dataset_shard_markers_must_be_set() -> None:
    assert "no rank/world_size/shard attribute" in (unsharded_reason(DataLoader(Stream())) or "")
    assert unsharded_reason(DataLoader(RankStream())) is None


def test_data_wait_finding_quotes_the_numbers() -> None:
    f = data_wait_finding("train_dataloader", 0.41, 10, 60, 0)
    assert "41% of step time over steps 10-60" in f.message and "num_workers=0" in f.message


def test_data_wait_finding_never_asks_for_more_workers_than_cores() -> None:
    """The live warning's fix fits this machine: with every core of the rank already a worker, more cannot help."""
    cores = available_cpus()
    per_rank = max(1, cores // 2)
    full = data_wait_finding("train_dataloader", 0.3, 10, 60, per_rank, local_world_size=2)
    assert f"num_workers={per_rank} already uses the {per_rank} CPU core" in full.message
    assert "add workers" not in full.message and "raise num_workers" not in full.message
    assert "larger batches" in full.message and "keep the data on the device" in full.message
    if cores > 1:
        fewer = data_wait_finding("train_dataloader", 0.3, 10, 60, 1, local_world_size=1)
        assert f"raise num_workers (up to {cores}, the CPU cores per local rank)" in fewer.message


# ---- Accelerate: recognised by class name, never imported -----------------------------------------------------------
def test_core_does_not_import_accelerate() -> None:
    code = "import sys, perf_callbacks.core.timing.dataloader; print('accelerate' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def prepared(dl: DataLoader, **kwargs: Any) -> Any:
    return prepare_data_loader(dl, num_processes=2, process_index=0, put_on_device=False, **kwargs)


@pytest.mark.parametrize("split_batches", [False, True])
def test_accelerate_sharded_loader_is_fine(split_batches: bool) -> None:
    dl = prepared(DataLoader(DATA, batch_size=8, shuffle=True, num_workers=2), split_batches=split_batches)
    assert accelerate_sharding(dl) == "BatchSamplerShard(num_processes=2)"
    assert inspect_accelerate_loader(dl, "dl", num_processes=2, cuda=False) == []


def test_no_distributed_sampler_warning_under_accelerate_iterable_shard() -> None:
    dl = prepared(DataLoader(Stream(), batch_size=8, num_workers=2), dispatch_batches=False)
    assert accelerate_sharding(dl) == "IterableDatasetShard(num_processes=2)"
    assert inspect_accelerate_loader(dl, "dl", num_processes=2, cuda=False) == []


def test_distributed_sampler_under_batch_sampler_shard_is_double_sharding() -> None:
    user = DataLoader(DATA, batch_size=8, num_workers=2, sampler=DistributedSampler(DATA, num_replicas=2, rank=0))
    (f,) = inspect_accelerate_loader(prepared(user), "prepared DataLoader #0", num_processes=2, cuda=False)
    assert f.code == "double_sharded"
    assert "BatchSamplerShard(num_processes=2)" in f.message and "DistributedSampler(num_replicas=2)" in f.message
    assert "len(loader) is 2 batches per epoch where about 4 are expected" in f.message
    assert "remove your own sharding" in f.message and "accelerator.prepare()" in f.message


def test_double_sharding_seen_by_length_alone() -> None:
    user = DataLoader(DATA, batch_size=8, num_workers=2, sampler=EveryOther(64))
    evidence = double_sharding_evidence(prepared(user), num_processes=2)
    assert evidence == ["len(loader) is 2 batches per epoch where about 4 are expected "
                        "(ceil(64 samples / 16 per global batch))"]


def test_weighted_sampler_covering_less_on_purpose_is_not_double_sharding() -> None:
    sampler = WeightedRandomSampler(torch.ones(64), num_samples=16)
    dl = prepared(DataLoader(DATA, batch_size=8, num_workers=2, sampler=sampler))
    assert inspect_accelerate_loader(dl, "dl", num_processes=2, cuda=False) == []


def test_distributed_sampler_under_dispatcher_is_double_sharding() -> None:
    user = DataLoader(DATA, batch_size=8, num_workers=2, sampler=DistributedSampler(DATA, num_replicas=2, rank=0))
    dl = prepare_data_loader(user, num_processes=2, process_index=0, put_on_device=True, device=torch.device("cpu"),
                             dispatch_batches=True)
    assert accelerate_sharding(dl).startswith("DataLoaderDispatcher")
    assert codes(inspect_accelerate_loader(dl, "dl", num_processes=2, cuda=False)) == ["double_sharded"]


def test_unprepared_loader_is_not_sharded_and_the_fix_is_prepare() -> None:
    (f,) = inspect_accelerate_loader(DataLoader(DATA, num_workers=2), "dl", num_processes=2, cuda=False)
    assert f.code == "not_sharded" and "pass it through accelerator.prepare()" in f.message
    own = DataLoader(DATA, num_workers=2, sampler=DistributedSampler(DATA, num_replicas=2, rank=0))
    assert inspect_accelerate_loader(own, "dl", num_processes=2, cuda=False) == []


def test_single_process_has_no_sharding_checks() -> None:
    dl = prepare_data_loader(DataLoader(DATA, batch_size=8), num_processes=1, process_index=0, put_on_device=False)
    assert codes(inspect_accelerate_loader(dl, "dl", num_processes=1, cuda=False)) == ["num_workers"]


def test_prepared_loader_passes_num_workers_through() -> None:
    dl = prepared(DataLoader(DATA, batch_size=8, num_workers=0))
    assert codes(inspect_accelerate_loader(dl, "dl", num_processes=2, cuda=True)) == ["num_workers", "pin_memory"]


# ---- HF datasets, faked by module and class name --------------------------------------------------------------------
def hf_iterable(distributed: object) -> Any:
    cls = type("IterableDataset", (IterableDataset,), {"__iter__": lambda self: iter(range(64)),
                                                       "__module__": "datasets.iterable_dataset"})
    ds = cls()
    ds._distributed = distributed
    return ds


class FakeShard:  # what Accelerate leaves when it shards a datasets.IterableDataset with .shard()
    def __init__(self, dataset: Any) -> None:
        self.base_dataloader = DataLoader(dataset, batch_size=8, num_workers=2)


def test_hf_datasets_sharding_is_recognised() -> None:
    assert accelerate_sharding(FakeShard(hf_iterable(None))) == "datasets.IterableDataset.shard"
    assert inspect_accelerate_loader(FakeShard(hf_iterable(None)), "dl", num_processes=2, cuda=False) == []


def test_hf_split_dataset_by_node_then_prepare_is_double_sharding() -> None:
    (f,) = inspect_accelerate_loader(FakeShard(hf_iterable(object())), "dl", num_processes=2, cuda=False)
    assert f.code == "double_sharded" and "split_dataset_by_node" in f.message

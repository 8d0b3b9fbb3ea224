"""The double-sharding length check under Accelerate: a full epoch, rounded as Accelerate rounds it.

A resumed loader (``skip_first_batches``) is judged by its full epoch, and ``drop_last`` or uneven batches round the
expected count down, so neither is mistaken for a ``DistributedSampler`` under ``accelerator.prepare()``.
"""

from __future__ import annotations

from typing import Any

import pytest
from accelerate.data_loader import prepare_data_loader, skip_first_batches
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from perf_callbacks.core.timing.dataloader import double_sharding_evidence
from tests.integrations.acc_helpers import DATA

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # conftest.py: skip_first_batches reads PartialState


def prepared(dl: DataLoader, rank: int = 0, **kwargs: Any) -> Any:
    return prepare_data_loader(dl, num_processes=2, process_index=rank, put_on_device=False, **kwargs)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_loader_resumed_with_skip_first_batches_is_not_double_sharding(rank: int) -> None:
    skipped = skip_first_batches(prepared(DataLoader(DATA, batch_size=4, shuffle=True), rank), 5)
    assert len(skipped) == 3 and double_sharding_evidence(skipped, 2) == []
    user = DataLoader(DATA, batch_size=4, sampler=DistributedSampler(DATA, num_replicas=2, rank=rank))
    (evidence,) = [e for e in double_sharding_evidence(skip_first_batches(prepared(user, rank), 1), 2) if "len" in e]
    assert evidence == ("len(loader) is 4 batches per epoch (3 left after skipping the first ones) where about 8 are "
                        "expected (ceil(64 samples / 8 per global batch))")


@pytest.mark.parametrize(("rank", "options"), [(0, {}), (1, {}), (1, {"even_batches": False})])
def test_few_batches_rounded_down_are_not_double_sharding(rank: int, options: dict[str, bool]) -> None:
    # 64 samples, drop_last: 5 batches of 12, 2 per rank; uneven batches: 5 batches of 13, rank 1 gets 2
    size, drop_last = (13, False) if options else (12, True)
    dl = prepared(DataLoader(DATA, batch_size=size, drop_last=drop_last), rank, **options)
    assert len(dl) == 2 and double_sharding_evidence(dl, 2) == []
    user = DataLoader(DATA, batch_size=12, drop_last=True, sampler=DistributedSampler(DATA, num_replicas=2, rank=rank))
    assert double_sharding_evidence(prepared(user, rank), 2)[-1] == (
        "len(loader) is 1 batches per epoch where about 2 are expected (floor(64 samples / 24 per global batch))")

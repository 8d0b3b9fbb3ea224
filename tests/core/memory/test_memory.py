"""Memory sampling: one kept-open ``/proc/self/statm`` per process; a device reading that raises, in the engine."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from unittest import mock

import pytest

from perf_callbacks.core.memory.sampler import host_rss_bytes
from perf_callbacks.exceptions import InstrumentUnavailableWarning
from tests.core.engine_helpers import make_engine, run_steps


def _statm_rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_forked_child_reads_its_own_rss_not_its_parents() -> None:
    """The parent's file is open before the fork; the child, which frees 256 MB the parent holds, reads its own."""
    block = bytearray(256 << 20)
    block[::4096] = b"\x01" * len(block[::4096])  # resident in the parent
    assert host_rss_bytes() == pytest.approx(_statm_rss(), abs=8 << 20)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: free the block, then read through the kept-open file
        del block
        os.write(write, f"{host_rss_bytes()} {_statm_rss()}".encode())
        os._exit(0)
    os.waitpid(pid, 0)
    ours, truth = map(int, os.read(read, 100).split())
    assert ours == pytest.approx(truth, abs=8 << 20)
    assert ours < host_rss_bytes() - (128 << 20)  # not the parent's, which still holds the block


def test_a_memory_reading_that_raises_turns_the_metrics_off_with_one_warning(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, [], schedule={"skip_first": 1000}, flops=False)
    assert engine.memory is not None
    with mock.patch.object(engine.memory, "sample", side_effect=OSError("NVML gone")), \
            pytest.warns(InstrumentUnavailableWarning) as caught:
        run_steps(engine, 6)  # logged at step 5
    assert [str(w.message) for w in caught] == [
        "perf-callbacks: metrics disabled: OSError: NVML gone; training continues"]
    assert engine.memory is None and not engine.outputs.enabled("metrics")

"""Host memory sampling: one kept-open ``/proc/self/statm`` per process."""

from __future__ import annotations

import os
import sys

import pytest

from perf_callbacks.core.memory.sampler import host_rss_bytes


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

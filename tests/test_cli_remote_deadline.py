"""The no-progress bound of a remote read (``cli/remote_deadline.py``): a download that keeps receiving bytes goes on
past it, one that receives nothing ends at it, and a call that never answers ends at it, on a real fsspec
asynchronous file system whose downloads trickle at a pace the test sets."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from fsspec.asyn import AsyncFileSystem

from perf_callbacks.cli.remote_deadline import Bounded, RemoteStalled, RemoteTimeout


class _Trickle(AsyncFileSystem):  # type: ignore[misc]
    """Downloads that receive ``pieces`` bytes, one every ``every_s`` seconds, written as they come or, with
    ``buffered``, told to the callback as they come and written at the end; ``_info`` never answers."""

    protocol = "trickle"

    def __init__(self, pieces: int, every_s: float, buffered: bool = False, **kwargs: Any) -> None:
        super().__init__(skip_instance_cache=True, **kwargs)
        self.pieces, self.every_s, self.buffered = pieces, every_s, buffered

    async def _get_file(self, rpath: str, lpath: str, callback: Any = None, **kwargs: Any) -> None:
        got = b""
        with open(lpath, "wb") as out:
            for _ in range(self.pieces):
                await asyncio.sleep(self.every_s)
                got += b"x"
                if self.buffered:
                    callback.relative_update(1)
                else:
                    out.write(b"x")
                    out.flush()
            if self.buffered:
                out.write(got)

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {}


@pytest.mark.parametrize("buffered", [False, True])
def test_a_download_that_keeps_receiving_goes_on_past_the_no_progress_bound(tmp_path: Path, buffered: bool) -> None:
    """10 bytes, one every 0.1 s (1 s in all), with a bound of 0.5 s without progress: the download completes, its
    progress seen in its file or (``buffered``) in the callback it is given."""
    fs = Bounded(_Trickle(pieces=10, every_s=0.1, buffered=buffered), "trickle://x", timeout_s=None, no_progress_s=0.5)
    fs.get_file("x", str(tmp_path / "x"))
    assert (tmp_path / "x").read_bytes() == b"x" * 10


def test_a_download_that_stops_receiving_ends_at_the_no_progress_bound(tmp_path: Path) -> None:
    """One byte, then none for 1 hour, with a bound of 0.5 s: it ends with RemoteStalled within 10x the bound."""
    fs = Bounded(_Trickle(pieces=2, every_s=3600), "trickle://x", timeout_s=None, no_progress_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(RemoteStalled, match=r"^no answer from trickle://x for 0\.5 s: the storage stopped sending"):
        fs.get_file("x", str(tmp_path / "x"))
    assert 0.5 <= time.monotonic() - t0 < 5.0


def test_a_call_that_never_answers_ends_at_the_no_progress_bound_within_the_total_one() -> None:
    fs = Bounded(_Trickle(pieces=0, every_s=0), "trickle://x", timeout_s=300, no_progress_s=0.5)
    with pytest.raises(RemoteStalled):
        fs.info("x")
    total = Bounded(_Trickle(pieces=0, every_s=0), "trickle://x", timeout_s=0.5, no_progress_s=30)
    with pytest.raises(RemoteTimeout, match=r"^timed out after 0\.5 s reading trickle://x"):
        total.info("x")

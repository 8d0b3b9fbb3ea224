"""An endpoint that accepts connections and never answers: a socket on 127.0.0.1 that reads and says nothing.

It stops by itself after ``life_s`` seconds (closing every connection: the client then sees a reset, not a hang), so
a test of code that would wait on it forever ends anyway, and fails on its own bound.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from types import TracebackType

import pytest


class SilentServer:
    """Listens on ``endpoint``; every connection is accepted, read from and never answered until ``life_s``."""

    def __init__(self, life_s: float = 30.0) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        self.endpoint = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._until = time.monotonic() + life_s
        self._thread = threading.Thread(target=self._serve, name="silent-server", daemon=True)
        self._thread.start()

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def connections(self) -> int:
        """How many connections it has accepted so far."""
        return self.accepted

    @property
    def options(self) -> dict[str, object]:
        """``storage_options`` that reach this endpoint with s3fs."""
        return {"client_kwargs": {"endpoint_url": self.endpoint}, "skip_instance_cache": True,
                "use_listings_cache": False}

    def _serve(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._until:
            try:
                conn, _ = self._sock.accept()
                conn.setblocking(False)
                self._conns.append(conn)
                self.accepted += 1
            except OSError:
                pass
            for c in self._conns:  # read what the client sends (its buffers never fill), answer nothing
                with contextlib.suppress(OSError):
                    c.recv(65536)
        self._close()

    def _close(self) -> None:
        for c in self._conns:
            c.close()
        self._sock.close()

    def stop(self) -> None:
        """Stop now: every connection held is closed."""
        self._stop.set()
        self._thread.join(5)

    close = stop


@pytest.fixture(name="silent")
def silent_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[SilentServer]:
    """A silent endpoint, with dummy AWS credentials (nothing may reach a real account)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    pytest.importorskip("s3fs")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    server = SilentServer()
    try:
        yield server
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()

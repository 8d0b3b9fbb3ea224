"""Inputs no trace or run folder should hold, built in the test that needs them: a gzip bomb, a silent server.

``gzip_bomb`` writes a small ``.gz`` that inflates to ``mb`` MB: a Kineto header, then spaces (compressed by
repeating one compressed block, so building 300 MB takes a fraction of a second). ``SilentServer`` accepts TCP
connections on 127.0.0.1 and never sends a byte; it stops itself after ``life_s`` seconds whatever the test does.
"""

from __future__ import annotations

import socket
import threading
import time
import zlib
from pathlib import Path
from types import TracebackType

_BLOCK = 1 << 20


def gzip_bomb(path: Path, mb: int) -> Path:
    """A gzip file of a trace's header followed by ``mb`` MB of spaces (a few hundred KB on disk)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    spaces = b" " * _BLOCK
    with path.open("wb") as out:
        head = b'{"schemaVersion": 1, "traceEvents": [\n  {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1'
        out.write(packer.compress(head))
        for _ in range(mb):
            out.write(packer.compress(spaces))
        out.write(packer.compress(b"}\n  ]}") + packer.flush())
    return path


class SilentServer:
    """A TCP server on loopback that accepts every connection and never answers (a hung endpoint).

    It serves from its own thread until :meth:`close`, or ``life_s`` seconds at most whatever the test does.
    """

    def __init__(self, life_s: float = 300.0) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.endpoint = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop_at = time.monotonic() + life_s
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def connections(self) -> int:
        """How many connections it has accepted so far."""
        return len(self._held)

    def close(self) -> None:
        """Stop accepting and close every connection held."""
        self._stop_at = 0.0
        self._thread.join()

    def _serve(self) -> None:
        while time.monotonic() < self._stop_at:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self._held.append(conn)  # read nothing, answer nothing
        self._sock.close()
        for conn in self._held:
            conn.close()

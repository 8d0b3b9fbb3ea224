"""Inputs no trace or run folder should hold, built in the test that needs them: a gzip bomb, a silent server.

``gzip_bomb`` writes a small ``.gz`` that inflates to ``mb`` MB: a Kineto header, then spaces (compressed by
repeating one compressed block, so building 300 MB takes a fraction of a second). ``SilentServer``
(``tests/silent_server.py``) accepts TCP connections on 127.0.0.1 and never sends a byte; it stops itself after
``life_s`` seconds.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from tests.silent_server import SilentServer

__all__ = ["SilentServer", "gzip_bomb"]

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

"""A real full disk for tests: a 64 KiB tmpfs mounted under the test's ``tmp_path``, unmounted at the end.

Mounting needs root, which CI has (``.ci/run`` runs as root). Where it is impossible the test is skipped, and in CI a
skip fails the run (``tests/conftest.py``), so the full-disk tests always run there.

``fill(folder)`` writes zeros until the file system is full, the way another process filling the disk would.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SIZE = "64k"
ROOMY = "8m"


def _mounted(tmp_path: Path, size: str) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs at ``tmp_path / "small"``."""
    yield from _mounted(tmp_path, SIZE)


@pytest.fixture
def roomy_fs(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs at ``tmp_path / "small"``: room for what a test writes before it ``fill``s the rest.

    (A hang dump's stacks.txt holds every thread of the test process: in a long pytest session it outgrows 64 KiB.)
    """
    yield from _mounted(tmp_path, ROOMY)


def fill(folder: Path, name: str = "filler") -> Path:
    """Write zeros to ``folder/name`` until the file system is full; returns the file (remove it to free the disk)."""
    path = folder / name
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(bytes(4096))
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise
                return path

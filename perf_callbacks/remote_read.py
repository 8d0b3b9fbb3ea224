"""Reading a remote ``output_dir`` (``s3://``, ``gs://``...) for ``perf-callbacks report`` and ``diff``, sidecars first.

The analysis reads local files only (it is standard-library code), so the remote run folders are mirrored into a
temporary folder, reading as little as possible: every sidecar (``rank{R}.summary.json``, kilobytes), and for each
window whose traces all have a matching sidecar (the rule ``report`` itself follows) only the first 64 KiB of each
trace, which tells the report it is a trace, in a sparse file of the trace's size. A window without matching
sidecars (or ``--no-sidecars``, ``--top`` over 10) gets its traces downloaded whole. Downloads run ``jobs`` at once.

Example:
    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> fs.pipe("/doc/perf/run/window-000001-000002/rank0.summary.json", b"{}")
    >>> with fetched("memory://doc/perf") as local:
    ...     sorted(p.relative_to(local).as_posix() for p in local.rglob("*.json"))
    ['run/window-000001-000002/rank0.summary.json']
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

from perf_callbacks.core.remote import is_remote

__all__ = ["fetched", "is_remote"]
HEAD_BYTES = 64 << 10
_TRACE_ENDS = (".json", ".json.gz")
_SIDECAR_END = ".summary.json"


@contextlib.contextmanager
def fetched(url: str, storage_options: Mapping[str, Any] | None = None, jobs: int = 8,
            sidecars: bool = True) -> Iterator[Path]:
    """A temporary local folder standing for ``url`` (a trace file, a window, a run folder or an ``output_dir``).

    Raises:
        FileNotFoundError: nothing at ``url``.
    """
    import fsspec

    fs, root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    tmp = Path(tempfile.mkdtemp(prefix="perf-callbacks-remote-"))
    try:
        if fs.isfile(root):
            local = tmp / PurePosixPath(root).name
            fs.get_file(root, str(local))
            yield local
            return
        infos = {p: i for p, i in fs.find(root, detail=True).items() if i.get("type") != "directory"}
        if not infos:
            raise FileNotFoundError(f"no file under {url}")
        _mirror(fs, root.rstrip("/"), infos, tmp, jobs, sidecars)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _mirror(fs: Any, root: str, infos: dict[str, dict[str, Any]], tmp: Path, jobs: int, sidecars: bool) -> None:
    from perf_callbacks.analysis.collect import from_sidecar

    def local(path: str) -> Path:
        return tmp / PurePosixPath(path).relative_to(root)

    wanted = {p: i for p, i in infos.items() if not _hidden(p, root) and p.endswith(_TRACE_ENDS)}
    side = [p for p in wanted if p.endswith(_SIDECAR_END)]
    traces = [p for p in wanted if not p.endswith(_SIDECAR_END)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(lambda p: _get(fs, p, local(p), wanted[p]), side))
        heads = [p for p in traces if sidecars and wanted[p].get("size", 0) > HEAD_BYTES]
        list(pool.map(lambda p: _get(fs, p, local(p), wanted[p], head=True), heads))
        folders: dict[str, list[str]] = {}
        for p in traces:
            folders.setdefault(str(PurePosixPath(p).parent), []).append(p)
        whole = [p for p in traces if p not in heads]
        for files in folders.values():  # a window the report would parse gets its traces whole
            if any(p in heads for p in files) and not all(from_sidecar(local(p)) for p in files):
                whole += [p for p in files if p in heads]
        list(pool.map(lambda p: _get(fs, p, local(p), wanted[p]), whole))


def _get(fs: Any, path: str, dest: Path, info: dict[str, Any], head: bool = False) -> None:
    """Download ``path`` to ``dest`` (with ``head``: its first bytes, in a sparse file of its size); keep its mtime."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if head:
        with dest.open("wb") as out:
            out.write(fs.cat_file(path, start=0, end=HEAD_BYTES))  # one ranged GET
            out.truncate(int(info["size"]))
    else:
        fs.get_file(path, str(dest))
    mtime = _mtime(info)
    if mtime is not None:
        os.utime(dest, (mtime, mtime))


def _mtime(info: dict[str, Any]) -> float | None:
    for key in ("LastModified", "mtime", "created", "last_modified", "updated"):
        value = info.get(key)
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _hidden(path: str, root: str) -> bool:
    return any(part.startswith(".") for part in PurePosixPath(path).relative_to(root).parts)

"""Reading a remote ``output_dir`` (``s3://``, ``gs://``...) for ``perf-callbacks report`` and ``diff``, sidecars first.

The analysis reads local files only (it is standard-library code), so the remote run folders are mirrored into a
temporary folder, reading as little as possible. Every sidecar (``rank{R}.summary.json``, kilobytes) is downloaded
first. A trace that its sidecar names (same file name and byte size: the rule ``report`` itself follows) is not read
at all: an empty sparse file of its size and time stands for it. Any other ``.json``/``.json.gz`` file has its first
64 KiB read, to tell whether it is a trace. A window that the report parses (a trace without a matching sidecar,
``--no-sidecars``, ``--top`` over 10) gets its traces downloaded whole. Downloads run ``jobs`` at once.

The reading has one overall bound, ``timeout_s`` (an endpoint that accepts connections and never answers would
otherwise hold the command for botocore's read timeout times every retry: minutes). Past it every request still
pending is cancelled and :class:`RemoteTimeout` says so. The storage's own errors (an unreachable endpoint, missing
or refused credentials) become one :class:`RemoteError` line that names the URL and the cause; a missing object stays
a ``FileNotFoundError``. That bound and those errors are ``cli/remote_deadline.py``'s.

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
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from perf_callbacks.cli.remote_deadline import TIMEOUT_ENV as TIMEOUT_ENV  # the defaults' names, as they were here
from perf_callbacks.cli.remote_deadline import TIMEOUT_S as TIMEOUT_S
from perf_callbacks.cli.remote_deadline import (
    Bounded,
    RemoteError,
    RemoteTimeout,
    bad_options,
    timeout_from_env,
)
from perf_callbacks.core.files.remote import is_remote

__all__ = ["Mirror", "RemoteError", "RemoteTimeout", "fetched", "is_remote", "mirrored", "timeout_from_env"]
HEAD_BYTES = 64 << 10
_TRACE_ENDS = (".json", ".json.gz")
_SIDECAR_END = ".summary.json"


@contextlib.contextmanager
def fetched(url: str, storage_options: Mapping[str, Any] | None = None, jobs: int = 8,
            sidecars: bool = True, timeout_s: float | None = None) -> Iterator[Path]:
    """A temporary local folder standing for ``url`` (a trace file, a window, a run folder or an ``output_dir``).

    Raises:
        FileNotFoundError: nothing at ``url``.
        RemoteError: the storage could not be read (:class:`RemoteTimeout` after ``timeout_s`` seconds).
    """
    with mirrored(url, storage_options, jobs, sidecars, timeout_s) as mirror:
        yield mirror.path


@dataclass
class Mirror:
    """A local stand-in for a URL, whose traces that sidecars summarise are empty stand-ins until :meth:`fill`.

    Args:
        path: the local file or folder standing for the URL.
        fs: the URL's file system; ``root``: its path there.
        partial: the remote files whose local copy is not whole yet (a stand-in or their first bytes), with info.
        jobs: downloads at once.
    """

    path: Path
    fs: Any
    root: str
    partial: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: int = 8

    def fill(self, files: Iterable[Path]) -> None:
        """Download whole those of ``files`` (local paths under :attr:`path`) that are not yet."""
        todo = [(f"{self.root}/{f.relative_to(self.path).as_posix()}", f) for f in files]
        todo = [(remote, local) for remote, local in todo if remote in self.partial]
        with ThreadPoolExecutor(max_workers=max(1, self.jobs)) as pool:
            list(pool.map(lambda job: _get(self.fs, job[0], job[1], self.partial[job[0]]), todo))
        for remote, _ in todo:
            del self.partial[remote]


@contextlib.contextmanager
def mirrored(url: str, storage_options: Mapping[str, Any] | None = None, jobs: int = 8,
             sidecars: bool = True, timeout_s: float | None = None) -> Iterator[Mirror]:
    """:func:`fetched`, as a :class:`Mirror` whose stand-ins can be downloaded whole later.

    ``timeout_s`` bounds every request of the mirror, :meth:`Mirror.fill` included (None or 0: no bound).

    Raises:
        FileNotFoundError: nothing at ``url``.
        RemoteError: the storage could not be read (:class:`RemoteTimeout` after ``timeout_s`` seconds).
    """
    import fsspec

    try:
        raw, root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except TypeError as err:  # an option the back end does not take
        raise bad_options(url, err) from err
    fs = Bounded(raw, url, timeout_s)
    tmp = Path(tempfile.mkdtemp(prefix="perf-callbacks-remote-"))
    try:
        if fs.isfile(root):
            local = tmp / PurePosixPath(root).name
            fs.get_file(root, str(local))
            yield Mirror(local, fs, root, jobs=jobs)
            return
        infos = {p: i for p, i in fs.find(root, detail=True).items() if i.get("type") != "directory"}
        if not infos:
            raise FileNotFoundError(f"no file under {url}")
        partial = _mirror(fs, root.rstrip("/"), infos, tmp, jobs, sidecars)
        yield Mirror(tmp, fs, root.rstrip("/"), partial, jobs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _mirror(fs: Any, root: str, infos: dict[str, dict[str, Any]], tmp: Path, jobs: int,
            sidecars: bool) -> dict[str, dict[str, Any]]:
    """Mirror ``infos`` under ``tmp`` (see the module's text); returns the files whose copy is not whole."""
    from perf_callbacks.analysis.rank.collect import from_sidecar
    from perf_callbacks.analysis.trace.discover import not_a_trace

    def local(path: str) -> Path:
        return tmp / PurePosixPath(path).relative_to(root)

    wanted = {p: i for p, i in infos.items() if not _hidden(p, root) and p.endswith(_TRACE_ENDS)}
    side = [p for p in wanted if p.endswith(_SIDECAR_END)]
    files = [p for p in wanted if not p.endswith(_SIDECAR_END)]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(lambda p: _get(fs, p, local(p), wanted[p]), side))
        named = [p for p in files if sidecars and _named_by_sidecar(local(p), wanted[p])]
        for p in named:  # a matching sidecar says it is a trace, and what the report needs of it: nothing downloaded
            _placeholder(local(p), wanted[p])
        rest = [p for p in files if p not in named]
        heads = [p for p in rest if sidecars and wanted[p].get("size", 0) > HEAD_BYTES]  # enough to tell a trace
        list(pool.map(lambda p: _get(fs, p, local(p), wanted[p], head=True), heads))
        whole = [p for p in rest if p not in heads]
        list(pool.map(lambda p: _get(fs, p, local(p), wanted[p]), whole))
        folders: dict[str, list[str]] = {}
        for p in files:
            if not_a_trace(local(p), sidecars) is None:
                folders.setdefault(str(PurePosixPath(p).parent), []).append(p)
        more = [p for traces in folders.values() if not all(from_sidecar(local(p)) for p in traces)  # parsed
                for p in traces if p in named or p in heads]
        list(pool.map(lambda p: _get(fs, p, local(p), wanted[p]), more))
    return {p: wanted[p] for p in (*named, *heads) if p not in more}


def _named_by_sidecar(trace: Path, info: dict[str, Any]) -> bool:
    """The (already fetched) sidecar that the report would read for ``trace`` names it, with its remote size."""
    from perf_callbacks._input_files import read_json
    from perf_callbacks.analysis.trace.loader import rank_from_name
    from perf_callbacks.analysis.trace.sidecar_store import FORMAT, contradicts

    rank = rank_from_name(trace)
    path = trace.with_name(f"rank{rank}.summary.json" if rank is not None else f"{trace.name}.summary.json")
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return False
    return (isinstance(data, dict) and data.get("format") == FORMAT and data.get("trace") == trace.name
            and data.get("trace_bytes") == info.get("size") and not contradicts(data, trace))


def _placeholder(dest: Path, info: dict[str, Any]) -> None:
    """An empty sparse file of the trace's size and time, standing for a trace its sidecar summarises."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("wb") as out:
        out.truncate(int(info["size"]))
    _keep_mtime(dest, info)


def _get(fs: Any, path: str, dest: Path, info: dict[str, Any], head: bool = False) -> None:
    """Download ``path`` to ``dest`` (with ``head``: its first bytes, in a sparse file of its size); keep its mtime."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if head:
        with dest.open("wb") as out:
            out.write(fs.cat_file(path, start=0, end=HEAD_BYTES))  # one ranged GET
            out.truncate(int(info["size"]))
    else:
        fs.get_file(path, str(dest))
    _keep_mtime(dest, info)


def _keep_mtime(dest: Path, info: dict[str, Any]) -> None:
    """Give ``dest`` the object's time, which orders the windows as a local run's file times do.

    Without one, every file gets the same time (the epoch), so that windows are ordered by name as ties are locally,
    never by which download finished first.
    """
    mtime = _mtime(info)
    os.utime(dest, (mtime or 0.0, mtime or 0.0))


def _mtime(info: dict[str, Any]) -> float | None:
    """The object's modification time: a datetime, a number or an ISO 8601 text (gcsfs' ``updated``)."""
    for key in ("LastModified", "mtime", "last_modified", "updated", "created"):
        value = info.get(key)
        if isinstance(value, str):
            try:
                value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _hidden(path: str, root: str) -> bool:
    return any(part.startswith(".") for part in PurePosixPath(path).relative_to(root).parts)

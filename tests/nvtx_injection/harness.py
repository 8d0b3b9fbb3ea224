"""Run Python code with the test NVTX injection library attached and return the NVTX events it emitted.

NVTX looks for ``NVTX_INJECTION64_PATH`` once, at the first NVTX call of each process, so the code runs in a fresh
subprocess with the variable already set. ``inject.c`` writes one line per event to the file named by ``NVTX_LOG``.

Usage in a test::

    @pytest.fixture(scope="session")
    def injection_lib(tmp_path_factory):
        return build_injection_lib(tmp_path_factory)

    def test_x(injection_lib, tmp_path):
        events = run_with_injection("import nvtx; nvtx.push_range('a'); nvtx.pop_range()", tmp_path, injection_lib)
        assert_balanced(events)
        assert [e.message for e in pushes(events)] == ["a"]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

SOURCE = Path(__file__).with_name("inject.c")
_built: Path | None = None


_REPO = Path(__file__).resolve().parents[2]


class Event(NamedTuple):
    """One NVTX call seen by the injection library.

    Attributes:
        kind: ``push``, ``pop``, ``mark``, ``start`` (process range start), ``end`` or ``domain`` (domain created).
        tid: OS thread id of the caller; push/pop stacks are per thread and per domain.
        domain: the domain name; ``""`` for the default domain (``nvtxRangePushA`` and friends).
        message: the range/mark text, registered strings resolved to their text; ``""`` for pop/end/domain.
        category: the category name given with ``nvtxDomainNameCategoryA``, else its number, ``""`` for none.
        payload: the int64/uint64/int32 payload as ``int``, a float payload as ``float``, ``None`` for none.
        range_id: the id of a ``start``/``end`` process range, else ``None``.
    """

    kind: str
    tid: int
    domain: str
    message: str = ""
    category: str = ""
    payload: int | float | None = None
    range_id: int | None = None


def build_injection_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Compile ``inject.c`` once per test session (``cc -shared -fPIC -O2``); skip the test without a C compiler."""
    global _built
    if _built is not None and _built.exists():
        return _built
    return _compile(tmp_path_factory.mktemp("nvtx_injection"))


def run_with_injection(
    script: str,
    tmp_path: Path,
    lib: Path | None = None,
    *,
    inject: bool = True,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> list[Event]:
    """Run ``script`` with ``python`` in a subprocess under the injection library and return its NVTX events.

    The script runs in ``tmp_path`` with PerfWarnings turned into errors. A non-zero exit fails the test and shows the
    script's stderr. With ``inject=False`` the library is not attached (NVTX is a no-op) and the result is ``[]``.

    Args:
        script: Python source text.
        tmp_path: where the script, the log and (if ``lib`` is None and none was built yet) the library go.
        lib: the compiled library from :func:`build_injection_lib`.
        inject: attach the library.
        env: extra environment variables.
        timeout: seconds before the subprocess is killed.
    """
    path = tmp_path / "nvtx_script.py"
    prelude = "import warnings\nfrom perf_callbacks.exceptions import PerfWarning\nwarnings.simplefilter('error', PerfWarning)\n"
    path.write_text(prelude + script)
    log = tmp_path / "nvtx_events.log"
    log.unlink(missing_ok=True)
    full_env = {k: v for k, v in os.environ.items() if k not in ("NVTX_INJECTION64_PATH", "NVTX_DISABLE")}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), os.environ.get("PYTHONPATH")]))
    full_env.update(env or {})
    if inject:
        full_env["NVTX_INJECTION64_PATH"] = str(lib or _built or _compile(tmp_path))
        full_env["NVTX_LOG"] = str(log)
    cmd = [sys.executable, str(path)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"script exited with {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return parse_events(log.read_text()) if log.exists() else []


def parse_events(text: str) -> list[Event]:
    """Parse the lines ``inject.c`` writes (see its header comment) into :class:`Event` tuples."""
    events = []
    for line in text.splitlines():
        kind, tid, domain, *rest = line.split("\t")
        if kind in ("push", "mark", "start"):
            message, category, payload = rest[:3]
            range_id = int(rest[3]) if kind == "start" else None
            events.append(Event(kind, int(tid), domain, message, category, _number(payload), range_id))
        elif kind == "end":
            events.append(Event(kind, int(tid), domain, range_id=int(rest[0])))
        else:
            events.append(Event(kind, int(tid), domain))
    return events


def pushes(events: list[Event], domain: str | None = None) -> list[Event]:
    """The ``push`` events, optionally of one domain."""
    return [e for e in events if e.kind == "push" and (domain is None or e.domain == domain)]


def assert_balanced(events: list[Event], domain: str | None = None) -> list[tuple[str, ...]]:
    """Assert every push has its pop on the same thread and domain, never popping an empty stack.

    Returns the nesting path of every push in order, e.g. ``("step", "forward", "encoder")``, so tests can assert
    the structure: ``assert ("step", "forward") in paths``.
    """
    stacks: dict[tuple[int, str], list[str]] = {}
    paths: list[tuple[str, ...]] = []
    for i, event in enumerate(events):
        if domain is not None and event.domain != domain:
            continue
        stack = stacks.setdefault((event.tid, event.domain), [])
        if event.kind == "push":
            stack.append(event.message)
            paths.append(tuple(stack))
        elif event.kind == "pop":
            assert stack, f"event {i}: pop with no open range in domain {event.domain!r} (thread {event.tid})"
            stack.pop()
    still_open = {key: stack for key, stack in stacks.items() if stack}
    assert not still_open, f"ranges never closed (thread, domain) -> open stack: {still_open}"
    return paths


def _compile(directory: Path) -> Path:
    global _built
    if not sys.platform.startswith("linux"):
        pytest.skip("the NVTX injection test library is built for Linux only")
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        pytest.skip("no C compiler (cc) to build the NVTX injection library")
    out = directory / "libnvtx_inject.so"
    cmd = [compiler, "-shared", "-fPIC", "-O2", "-o", str(out), str(SOURCE), "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"building the NVTX injection library failed:\n{' '.join(cmd)}\n{proc.stderr}")
    _built = out
    return out


def _number(text: str) -> int | float | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        return float(text)

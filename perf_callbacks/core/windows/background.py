"""Finishing a window off the training loop's critical path.

The training loop waits only for the profiler's export (the events must leave torch first). Compressing the trace
into place and analysing it run as a :class:`WindowJob` on one worker thread per process, started before training
(starting a thread at a window's end costs milliseconds on a busy machine): ``zlib`` releases the GIL while it
compresses, and the analysis runs in a separate, lower-priority Python process
(``python -m perf_callbacks.analysis.sidecar``) in a session of its own, so Ctrl-C at the terminal does not kill it
half-way. The worker waits for that process to exit, never for end-of-file on a pipe that a process the user forks
meanwhile (a persistent ``DataLoader`` worker) could hold open (see :mod:`perf_callbacks.core.files.detached`). The
engine polls finished jobs from its hooks (an event check, only while a job is pending) and waits for them when training
ends; a :class:`PageJob` then rebuilds the run's page once more on the same thread.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.trace.sidecar_store import CANNOT_WRITE, STDERR_PREFIX
from perf_callbacks.core.files.detached import run_detached
from perf_callbacks.core.files.outputs import remove_empty
from perf_callbacks.core.files.traces import compress_trace, write_text

ANALYSIS_TIMEOUT_S = 600.0
_WORKER = (
    "import os, sys\n"
    "try:\n    os.nice(10)\nexcept OSError:\n    pass\n"
    "from perf_callbacks.analysis.sidecar import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


class WindowJob:
    """Gzip one rank's raw trace into place, then (optionally) analyse it and write the window summary.

    Args:
        raw: the profiler's uncompressed export (a hidden scratch file, removed when done).
        dest: the trace's final name (``rank{R}.pt.trace.json.gz``); an existing file is never replaced.
        meta: what the engine knows of the window, stored in the sidecar (steps, partial, interrupted, overhead).
        analyse: write the ``rank{R}.summary.json`` sidecar.
        header: the summary's first lines; given on the reporting rank only, which also writes ``summary.txt``.
        top_k: operators in the summary.

    A failing output never ends the worker thread: the trace's error is kept in ``error`` (the profiler is then
    disabled), and a sidecar or ``summary.txt`` that could not be written in ``failures``, ``(writer, cause, path)``
    for :class:`~perf_callbacks.core.files.outputs.Outputs`, reported by the engine on the training thread.
    """

    def __init__(
        self, raw: Path, dest: Path, meta: dict[str, Any], analyse: bool, header: list[str] | None, top_k: int
    ) -> None:
        self.raw, self.dest, self.meta = raw, dest, meta
        self.analyse, self.header, self.top_k = analyse, header, top_k
        self.trace: Path | None = None
        self.error: BaseException | None = None
        self.failures: list[tuple[str, BaseException | str, Path | None]] = []
        self.write_summary = True  # False once summary.txt could not be written in this run
        self.write_page = True  # False once the run's report.html could not be written in this run
        self.tidy = False  # this process is the only writer of the run folder: a failed trace leaves no empty folder
        self.summary: str | None = None
        self.scalars: dict[str, float] = {}
        self.console: dict[str, str] | None = None  # the window's line as data: {verdict, figure, action}
        self.analysis_s = 0.0
        self.finished = threading.Event()
        self.rephrase: Callable[[str], str] = str  # the analysis' advice in the framework's own terms
        self.shown: Callable[[str], str] = str  # paths as the user will find them (a remote output_dir's URL)

    def start(self) -> None:
        """Queue the job on the worker thread."""
        _runner().put(self)

    def is_alive(self) -> bool:
        """Still queued or running."""
        return not self.finished.is_set()

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` seconds for the job."""
        self.finished.wait(timeout)

    def run(self) -> None:
        """Compress, then analyse; errors are kept in ``self.error`` for the engine."""
        try:
            self._run()
        except Exception as err:  # noqa: BLE001 - never a traceback from the worker thread
            self.failures.append(("sidecars", err, None))
        finally:
            self.finished.set()

    def _run(self) -> None:
        try:
            self.trace = compress_trace(self.raw, self.dest)
        except BaseException as err:  # noqa: BLE001 - reported to the engine, which disables the profiler
            self.error = err
            if self.tidy:
                self.raw.unlink(missing_ok=True)
                remove_empty([self.dest.parent, self.dest.parent.parent])  # the window's folder, then the run's
            return
        finally:
            self.raw.unlink(missing_ok=True)
        if self.analyse:
            t0 = time.perf_counter()
            sidecar = self._analyse(self.trace)
            self.analysis_s = time.perf_counter() - t0
            if self.header is not None:
                self._write_summary(self.trace, sidecar)

    def _analyse(self, trace: Path) -> dict[str, Any] | None:
        from perf_callbacks.analysis.sidecar import read_sidecar

        cmd = [sys.executable, "-c", _WORKER, str(trace), "--meta", json.dumps(self.meta), "--top-k", str(self.top_k)]
        try:
            code, stderr = run_detached(cmd, ANALYSIS_TIMEOUT_S, env=_worker_env())
        except (OSError, subprocess.SubprocessError) as err:
            return {"error": f"{type(err).__name__}: {err}"}
        if code == CANNOT_WRITE:  # the sidecar's own write failed: that writer is turned off
            cause = (stderr.strip().splitlines() or [""])[-1].removeprefix(STDERR_PREFIX)
            self.failures.append(("sidecars", cause, None))
            return {"error": cause}
        return read_sidecar(trace) or {"error": "the analysis process wrote no summary"}

    def _write_summary(self, trace: Path, sidecar: dict[str, Any] | None) -> None:
        sidecar = sidecar or {}
        if "error" in sidecar or not sidecar.get("text"):
            body = f"  (trace analysis unavailable: {sidecar.get('error', 'no result')}; run: perf-callbacks report "
            body += f"{trace.parent})"
        else:
            body = self.rephrase(str(sidecar["text"]))
            self.scalars = {k: float(v) for k, v in (sidecar.get("scalars") or {}).items()}
            line = sidecar.get("console")
            if isinstance(line, dict) and all(isinstance(line.get(k), str) for k in ("verdict", "figure", "action")):
                self.console = {"verdict": line["verdict"], "figure": line["figure"],
                                "action": self.rephrase(line["action"])}
        text = self.shown("\n".join([*(self.header or []), body.rstrip(), f"trace: {trace}"]) + "\n")
        if self.write_summary:
            try:
                write_text(trace.parent / "summary.txt", text)
            except OSError as err:  # the summary is still printed
                self.failures.append(("summaries", err, trace.parent / "summary.txt"))
        self.summary = text
        if self.write_page:
            _write_page(trace.parent.parent, self.failures)


class PageJob:
    """Rebuild the run's page once more at the run's end, on the same worker thread, after every window's job.

    Other ranks' sidecars written after this rank's last window summary are then on the page. A failure is kept in
    ``failures``, as a :class:`WindowJob` keeps it.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.failures: list[tuple[str, BaseException | str, Path | None]] = []
        self.finished = threading.Event()

    def start(self) -> None:
        """Queue the job on the worker thread (behind any window's job still queued)."""
        _runner().put(self)

    def run(self) -> None:
        """Write the page; never raises."""
        try:
            _write_page(self.run_dir, self.failures)
        finally:
            self.finished.set()


def _write_page(run_dir: Path, failures: list[tuple[str, BaseException | str, Path | None]]) -> None:
    """The run's page, ``report.html``, rebuilt from the sidecars written so far (no trace is read)."""
    try:
        from perf_callbacks.analysis.html.run_page import write_run_page

        write_run_page(run_dir)
    except Exception as err:  # noqa: BLE001 - a page that cannot be written never reaches training
        failures.append(("pages", err, run_dir / "report.html"))


def start_worker() -> None:
    """Start this process's worker thread now, before training (idempotent).

    The modules its jobs use are imported now too: a window flushed at exit (a hook never closed, ``atexit``) must
    import nothing then, as a module that registers a thread's exit hook (``concurrent.futures``) cannot be imported
    once the interpreter has begun to shut down (``RuntimeError: can't register atexit after shutdown``).
    """
    import perf_callbacks.analysis.html.run_page
    import perf_callbacks.analysis.sidecar  # noqa: F401

    _runner()


_QUEUE: queue.SimpleQueue[WindowJob | PageJob] | None = None
_LOCK = threading.Lock()


def _runner() -> queue.SimpleQueue[WindowJob | PageJob]:
    global _QUEUE
    with _LOCK:
        if _QUEUE is None or not any(t.name == "perf-callbacks-jobs" for t in threading.enumerate()):
            _QUEUE = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(_QUEUE,), name="perf-callbacks-jobs", daemon=True).start()
        return _QUEUE


def _forget_worker() -> None:
    """In a forked child: the parent's worker thread is not there, and another of its threads may have held the lock."""
    global _QUEUE, _LOCK
    _QUEUE, _LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_worker)


def _serve(jobs: queue.SimpleQueue[WindowJob | PageJob]) -> None:
    while True:
        jobs.get().run()


def _worker_env() -> dict[str, str]:
    """The child imports this very copy of perf_callbacks, installed or not."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env

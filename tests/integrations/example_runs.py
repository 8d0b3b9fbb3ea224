"""Run an example script (``examples/*/train.py``) as a user would, with a fork at the worst moment of each window.

:func:`run_example` starts ``python -m tests.integrations.example_runs EXAMPLE ARGS...``: this module, as the main
program, runs the example unchanged (``runpy``) after planting, in that process:

* at each window's end (``WindowJob.start``, on the training thread), a real ``DataLoader`` with a persistent worker
  (``fork``), started while the window's analysis process is being started: ``subprocess`` holds a pipe open then
  (the one the child's ``exec`` closes); a fork then, unless held off, keeps a copy of it for the whole run. The
  spawn waits for that fork to begin, then half a second more (``subprocess._fork_exec`` wrapped), so the fork falls
  inside it on any machine;
* one line per window end, per analysis process' exit and at the engine's close (the end of training), with
  ``time.monotonic()`` (the same clock in all processes of the machine), so the test measures the time from the last
  window's end, from the end of training and from the last analysis, to the exit.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARK = "perf-example-run:"
VERDICT = re.compile(r"^perf-callbacks: steps (\d+)-(\d+)(?: \(partial\))? \S+")


@dataclass
class ExampleRun:
    """What :func:`run_example` saw: the output's lines, the windows' ends, the analyses' exits, the process's exit."""

    lines: list[str]
    windows: dict[str, float]  # "first-last" -> when the window ended
    analyses: list[float]  # when each analysis process exited
    closed: float  # when training ended (the engine's close began)
    exited: float
    returncode: int

    def verdicts(self) -> set[str]:
        """The windows (``first-last``) that have a verdict line."""
        return {f"{m[1]}-{m[2]}" for line in self.lines if (m := VERDICT.match(line))}

    def after_last_window_s(self) -> float:
        """Seconds from the last window's end to the process's exit."""
        return self.exited - max(self.windows.values())

    def after_last_analysis_s(self) -> float:
        """Seconds from the end of training, or the last analysis process's exit if later, to the process's exit."""
        return self.exited - max(self.closed, *self.analyses)


def run_example(example: str, cwd: Path, *args: str, fork: bool = True, timeout_s: float = 600.0) -> ExampleRun:
    """Run ``examples/<example>`` with ``args`` in ``cwd`` (where it writes); ``fork``: plant the fork at each window."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           "PERF_EXAMPLE_FORK": "1" if fork else "", "PERF_EXAMPLE_MARKS": str(cwd / "analyses")}
    cmd = [sys.executable, "-m", "tests.integrations.example_runs", str(ROOT / "examples" / example), *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout_s, check=False)
    exited = time.monotonic()
    lines = proc.stdout.splitlines()
    windows = {words[2]: float(words[3]) for line in lines if (words := line.split())[:2] == [MARK, "window-end"]}
    closed = min((float(words[2]) for line in lines if (words := line.split())[:2] == [MARK, "close"]), default=exited)
    marks = cwd / "analyses"
    analyses = [float(p.read_text()) for p in marks.iterdir()] if marks.is_dir() else []
    return ExampleRun(lines, windows, analyses, closed, exited, proc.returncode)


# ---- in the example's process -------------------------------------------------------------------------------------
_FORKING = threading.Event()  # a fork of this process has begun
_SPAWNING = threading.Event()  # an analysis process is being started
_LOADERS: list[Any] = []  # the planted loaders' iterators: their workers live until the process exits


def _plant() -> None:
    from perf_callbacks.core.engine.engine import PerfEngine
    from perf_callbacks.core.windows import (
        background,  # registers perf-callbacks' fork hooks first: ours run before them
    )

    os.register_at_fork(before=_FORKING.set)
    background._WORKER = _timed(background._WORKER, os.environ["PERF_EXAMPLE_MARKS"])
    start = background.WindowJob.start

    def window_end(job: Any) -> None:
        first, last = job.meta["window"]
        print(f"{MARK} window-end {first}-{last} {time.monotonic()}", flush=True)
        start(job)
        if os.environ.get("PERF_EXAMPLE_FORK") and job.analyse and _SPAWNING.wait(60):
            _SPAWNING.clear()
            _LOADERS.append(_persistent_worker())

    background.WindowJob.start = window_end  # type: ignore[method-assign,assignment]
    close = PerfEngine.close

    def closing(engine: Any, *args: Any, **kwargs: Any) -> None:
        print(f"{MARK} close {time.monotonic()}", flush=True)
        close(engine, *args, **kwargs)

    PerfEngine.close = closing  # type: ignore[method-assign,assignment]
    if os.environ.get("PERF_EXAMPLE_FORK"):
        fork_exec = subprocess._fork_exec  # type: ignore[attr-defined]

        def spawn(*args: Any) -> Any:
            _FORKING.clear()
            _SPAWNING.set()
            _FORKING.wait(60)
            time.sleep(0.5)
            return fork_exec(*args)

        subprocess._fork_exec = spawn  # type: ignore[attr-defined]


def _timed(worker: str, marks: str) -> str:
    """The analysis process's script, writing when it exits into a file of its own under ``marks``."""
    body = "".join(f"    {line}\n" for line in worker.splitlines())
    return (f"try:\n{body}finally:\n    import os as _o, time as _t\n    _o.makedirs({marks!r}, exist_ok=True)\n"
            f"    open(_o.path.join({marks!r}, str(_o.getpid())), 'w').write(str(_t.monotonic()))\n")


def _persistent_worker() -> Any:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2, num_workers=1, persistent_workers=True,
                        multiprocessing_context="fork")
    it = iter(loader)
    next(it)
    return it


if __name__ == "__main__":
    _plant()
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")

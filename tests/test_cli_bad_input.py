"""``report`` and ``diff`` on input no run should hold: they end, in bounded memory, with one line and the rest reported.

A gzip bomb stops at ``--max-trace-mb`` (its memory bounded by that limit, the other windows reported); a FIFO where a
``hang.json``, a sidecar or a trace should be is never waited on; a ``dur`` of 1e300, a ``peak_tflops`` of 1e-300 and
a sidecar of 100,000 nested brackets are set aside with a note, never printed as a 300-digit number or an internal
error; Ctrl-C ends any command with one line and exit 130; a storage endpoint that accepts and never answers ends
after ``$PERF_CALLBACKS_NO_PROGRESS_S``, not the whole ``--timeout``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from perf_callbacks.analysis.sidecar import write_sidecar
from perf_callbacks.analysis.trace.sidecar_store import sidecar_path
from perf_callbacks.cli import main
from tests.analysis.conftest import fixture_trace, load_doc, save_doc
from tests.bad_inputs import SilentServer, gzip_bomb

WINDOW = "window-000004-000006"
_GIANT = re.compile(r"\d{20,}")


class Done(NamedTuple):
    code: int
    out: str
    err: str
    seconds: float
    max_rss: int


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120.0,
         interrupt_when: Callable[[int], bool] | None = None, group: bool = False) -> Done:
    """Run ``perf-callbacks ARGS`` in a child process; its own peak memory from ``wait4``; killed after ``timeout``.

    With ``interrupt_when``, SIGINT is sent once ``interrupt_when(pid)`` holds (the command is under way): to the
    process, or with ``group`` to its whole process group, as a terminal's Ctrl-C is.
    """
    out, err = (Path(os.environ.get("TMPDIR", "/tmp")) / f"pcb-{os.getpid()}-{n}" for n in ("out", "err"))
    with out.open("wb") as o, err.open("wb") as e:
        child = subprocess.Popen([sys.executable, "-m", "perf_callbacks.cli", *args], stdout=o, stderr=e,
                                 env={**os.environ, **(env or {})}, start_new_session=group)
    killed = threading.Event()
    killer = threading.Timer(timeout, lambda: (killed.set(), os.killpg(child.pid, signal.SIGKILL) if group
                                               else child.kill()))
    killer.start()
    t0 = time.monotonic()
    if interrupt_when is not None:
        while not (pid := os.wait4(child.pid, os.WNOHANG)[0]) and not interrupt_when(child.pid):
            time.sleep(0.05)
        assert not pid, "the command ended before it could be interrupted"
        if group:
            os.killpg(child.pid, signal.SIGINT)
        else:
            os.kill(child.pid, signal.SIGINT)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.monotonic() - t0
    killer.cancel()
    child.returncode = os.waitstatus_to_exitcode(status)
    done = Done(child.returncode, out.read_text(), err.read_text(), seconds, usage.ru_maxrss * 1024)
    out.unlink()
    err.unlink()
    assert not killed.is_set(), f"killed after {timeout:g} s: {done}"
    return done


def _window(root: Path, name: str = WINDOW, fixture: str = "sync_bound", sidecar: bool = True) -> Path:
    folder = root / "run" / name
    folder.mkdir(parents=True)
    trace = folder / "rank0.pt.trace.json.gz"
    shutil.copy(fixture_trace(fixture), trace)
    if sidecar:
        write_sidecar(trace, {"window": [4, 6], "partial": False, "steps": [4, 5, 6], "rank": 0})
    return trace


def _rss_over(mb: int, workers: int = 0) -> Callable[[int], bool]:
    """Whether the process (with ``workers``: each of that many of its child processes) holds over ``mb`` MB."""
    def rss(pid: int) -> int:
        try:
            match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
        except OSError:
            return 0
        return int(match.group(1)) if match else 0

    def children(pid: int) -> list[int]:
        try:
            return [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
                    for c in (t / "children").read_text().split()]
        except OSError:
            return []

    def over(pid: int) -> bool:
        if not workers:
            return rss(pid) > mb * 1024
        big = [c for c in children(pid) if rss(c) > mb * 1024]
        return len(big) >= workers

    return over


@pytest.mark.slow
def test_a_gzip_bomb_stops_at_the_limit_in_bounded_memory_and_the_other_window_is_reported(tmp_path: Path) -> None:
    """A 300 KB .gz of 256 MB of spaces, with a limit of 32 MB: one line naming the file and the limit, exit 1
    (partial), the good window's report, and a peak memory within 4x the limit of a plain report's."""
    _window(tmp_path, "window-000001-000003", sidecar=False)
    plain = _cli("report", str(tmp_path), "--jobs", "1")
    assert plain.code == 0, plain
    (tmp_path / "run" / WINDOW).mkdir()
    bomb = gzip_bomb(tmp_path / "run" / WINDOW / "rank0.pt.trace.json.gz", 256)
    assert bomb.stat().st_size < 1 << 20
    done = _cli("report", str(tmp_path), "--jobs", "1", env={"PERF_CALLBACKS_MAX_TRACE_MB": "32"})
    assert done.code == 1, done
    assert done.err == (f"perf-callbacks report: skipped {bomb}: more than 32 MB of JSON once decompressed, not read "
                        "(the limit: --max-trace-mb or $PERF_CALLBACKS_MAX_TRACE_MB; 0: no limit)\n")
    assert "verdict: sync_bound" in done.out
    assert done.max_rss < plain.max_rss + 4 * (32 << 20), (done.max_rss >> 20, plain.max_rss >> 20)
    by_option = _cli("report", str(bomb), "--jobs", "1", "--max-trace-mb", "16")
    assert (by_option.code, by_option.err.count("\n")) == (2, 1) and "more than 16 MB" in by_option.err


@pytest.mark.parametrize("where", ["hang.json", "sidecar", "trace"])
def test_a_fifo_in_the_run_folder_is_never_waited_on(tmp_path: Path, where: str) -> None:
    trace = _window(tmp_path)
    if where == "hang.json":
        (tmp_path / "run" / "hang-rank0").mkdir()
        os.mkfifo(tmp_path / "run" / "hang-rank0" / "hang.json")
    elif where == "sidecar":
        sidecar_path(trace).unlink()
        os.mkfifo(sidecar_path(trace))
    else:
        os.mkfifo(trace.with_name("rank1.pt.trace.json"))
    done = _cli("report", str(tmp_path), timeout=60)
    assert (done.code, done.err) == (0, ""), done
    assert "verdict: sync_bound" in done.out
    if where == "sidecar":
        assert ("note: rank0.summary.json set aside (not a regular file (a FIFO), not read); its trace was parsed"
                in done.out)
    fifo = tmp_path / "fifo.pt.trace.json"
    os.mkfifo(fifo)
    alone = _cli("report", str(fifo), timeout=60)
    assert (alone.code, alone.out) == (2, "")
    assert alone.err == (f"perf-callbacks report: {fifo} is not a regular file or a folder (a FIFO, a device or a "
                         "socket): not read\n")


@pytest.mark.parametrize("field", ["dur", "ts"])
def test_an_event_of_1e300_is_set_aside_with_a_note_not_printed(tmp_path: Path, field: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    doc = load_doc("sync_bound")
    picked = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    picked[field] = 1e300
    folder = tmp_path / "run" / WINDOW
    folder.mkdir(parents=True)
    save_doc(folder / "rank0.pt.trace.json.gz", doc)
    for args in (["report", str(tmp_path)], ["report", str(tmp_path), "--json"], ["diff", str(tmp_path),
                                                                                  str(tmp_path)]):
        assert main(args) == 0
        out, err = capsys.readouterr()
        assert not _GIANT.search(out + err), _GIANT.search(out + err)
    assert main(["report", str(tmp_path)]) == 0
    assert "note: rank0.pt.trace.json.gz: 1 malformed events skipped" in capsys.readouterr().out


def _flops(peak: float) -> dict[str, Any]:
    return {"flops_per_step": 4e12, "peak_tflops": peak, "note": "", "source": "given", "peak_source": "given",
            "dtype": "bf16"}


@pytest.mark.parametrize("where", ["sidecar", "trace"])
def test_a_peak_of_1e_minus_300_is_set_aside_with_a_note(tmp_path: Path, where: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run" / WINDOW
    folder.mkdir(parents=True)
    trace = folder / "rank0.pt.trace.json.gz"
    doc = load_doc("sync_bound")
    doc["perf_callbacks_flops"] = _flops(989.0 if where == "sidecar" else 1e-300)
    save_doc(trace, doc)
    side = write_sidecar(trace, {"window": [4, 6], "partial": False, "steps": [4, 5, 6], "rank": 0})
    if where == "sidecar":
        side["rank"]["flops"] = _flops(1e-300)
        sidecar_path(trace).write_text(json.dumps(side))
    assert main(["report", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert not _GIANT.search(out + err), _GIANT.search(out + err)
    if where == "sidecar":
        assert "note: rank0.summary.json set aside (a value of the wrong type, or one no trace gives" in out
        assert "MFU " in out  # the trace's own peak, 989 TFLOP/s
    else:
        assert "MFU: not given: peak_tflops 1e-300 is outside 1e-06 to 1e+06 TFLOP/s: set aside" in out


def test_a_sidecar_of_100000_nested_brackets_is_set_aside_with_a_note(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    trace = _window(tmp_path)
    sidecar_path(trace).write_text("[" * 100_000 + "]" * 100_000)
    for args in (["report", str(tmp_path)], ["diff", str(tmp_path), str(tmp_path)]):
        assert main(args) == 0
        out, err = capsys.readouterr()
        assert "internal error" not in out + err and "RecursionError" not in out + err
    assert main(["report", str(tmp_path)]) == 0
    assert ("note: rank0.summary.json set aside (nested deeper than 64 levels, not read); its trace was parsed"
            in capsys.readouterr().out)


def _connected(silent: SilentServer) -> Callable[[int], bool]:
    return lambda pid: silent.connections > 0


@pytest.mark.slow
def test_ctrl_c_in_a_long_report_ends_with_one_line_and_exit_130(tmp_path: Path) -> None:
    """SIGINT once the report is reading a 1 GB gzip bomb (its memory past 150 MB): one line, exit 130."""
    folder = tmp_path / "run" / WINDOW
    folder.mkdir(parents=True)
    gzip_bomb(folder / "rank0.pt.trace.json.gz", 1024)
    done = _cli("report", str(tmp_path), "--jobs", "1", interrupt_when=_rss_over(150),
                env={"PERF_CALLBACKS_MAX_TRACE_MB": "1024"})
    assert (done.code, done.err, done.out) == (130, "perf-callbacks report: interrupted\n", ""), done


@pytest.mark.slow
def test_ctrl_c_from_a_terminal_stops_the_parsing_processes_too(tmp_path: Path) -> None:
    """SIGINT to the whole process group (a terminal's Ctrl-C) while two worker processes each read a 512 MB gzip
    bomb: the workers print nothing and are stopped, the command says one line and exits 130."""
    folder = tmp_path / "run" / WINDOW
    folder.mkdir(parents=True)
    for rank in (0, 1):
        gzip_bomb(folder / f"rank{rank}.pt.trace.json.gz", 512)
    done = _cli("report", str(tmp_path), "--jobs", "2", interrupt_when=_rss_over(150, workers=2), group=True,
                env={"PERF_CALLBACKS_MAX_TRACE_MB": "512"})
    assert (done.code, done.err, done.out) == (130, "perf-callbacks report: interrupted\n", ""), done


@pytest.mark.parametrize("command", ["report", "diff", "capture"])
def test_ctrl_c_while_the_storage_never_answers_ends_with_one_line_and_exit_130(command: str) -> None:
    with SilentServer(life_s=120) as silent:
        env = {"AWS_ENDPOINT_URL": silent.endpoint, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y",
               "PERF_CALLBACKS_NO_PROGRESS_S": "0", "PERF_CALLBACKS_TIMEOUT": "0"}
        args = [command, "s3://perf-hung/perf", *(["s3://perf-hung/other"] if command == "diff" else [])]
        done = _cli(*args, env=env, interrupt_when=_connected(silent))
    assert (done.code, done.err, done.out) == (130, f"perf-callbacks {command}: interrupted\n", ""), done


@pytest.mark.parametrize("command", ["report", "diff"])
def test_a_storage_that_never_sends_a_byte_ends_after_the_no_progress_bound(command: str) -> None:
    """No byte for PERF_CALLBACKS_NO_PROGRESS_S (3 s here) ends the read with one line, exit 3, while the total
    bound (--timeout, 300 s by default) is far away."""
    bound = 3.0
    with SilentServer(life_s=120) as silent:
        env = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "PERF_CALLBACKS_NO_PROGRESS_S": f"{bound:g}"}
        options = json.dumps({"client_kwargs": {"endpoint_url": silent.endpoint}, "skip_instance_cache": True})
        args = [command, "s3://perf-hung/perf", *(["s3://perf-hung/other"] if command == "diff" else []),
                "--storage-options", options]
        done = _cli(*args, env=env, timeout=100)
    assert done.code == 3, done
    assert done.err == (f"perf-callbacks {command}: no answer from s3://perf-hung/perf for 3 s: the storage stopped "
                        "sending ($PERF_CALLBACKS_NO_PROGRESS_S sets this bound; 0: none)\n")
    assert bound <= done.seconds < 10 * bound

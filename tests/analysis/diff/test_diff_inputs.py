"""``perf-callbacks diff`` on awkward input and output: a closed pipe, an ASCII-only terminal, a trace nested too deeply
to parse, unreadable or partial windows. Never a traceback, and never exit 1 (which means a regression)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.sidecar import write_sidecar
from perf_callbacks.cli import main
from tests.analysis.conftest import fixture_trace, load_doc, save_doc
from tests.analysis.result_helpers import deep_trace


def _cli(*args: str, env: dict[str, str] | None = None, close_stdout: bool = False) -> tuple[int, str, str]:
    cmd = [sys.executable, "-m", "perf_callbacks.cli", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if close_stdout:  # the reader is gone before the command writes: `perf-callbacks diff A B | true`
        assert proc.stdout is not None
        proc.stdout.close()
        err = proc.communicate(timeout=120)[1]
        return proc.returncode, "", err.decode()
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out.decode("ascii", "replace"), err.decode()


@pytest.mark.parametrize("json_out", [False, True])
def test_closed_stdout_ends_quietly_with_exit_141(json_out: bool) -> None:
    sync = str(fixture_trace("sync_bound"))
    code, _, err = _cli("diff", sync, sync, *(["--json"] if json_out else []), close_stdout=True)
    assert (code, err) == (141, "")  # 128 + SIGPIPE, as a shell reports for Unix tools; never 1 (regression)


def test_a_path_the_terminal_cannot_encode_is_printed_escaped(tmp_path: Path) -> None:
    odd = tmp_path / "sub dir" / "my trace \u00fc.json.gz"
    odd.parent.mkdir()
    shutil.copy(fixture_trace("sync_bound"), odd)
    code, out, err = _cli("diff", str(odd), str(fixture_trace("sync_bound")),
                          env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert code == 0 and "Traceback" not in err, err
    assert "my trace \\xfc.json.gz (3 steps)" in out


def test_a_trace_nested_too_deeply_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = deep_trace(tmp_path / "deep.json")
    assert main(["diff", str(fixture_trace("sync_bound")), str(deep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(deep) in err and "nested too deeply" in err


def _windows(root: Path, names: list[str], drop_step: frozenset[str] = frozenset(), ranks: int = 1) -> list[Path]:
    """One window folder per name, oldest first; a window in ``drop_step`` loses its last ProfilerStep (partial)."""
    doc = load_doc("sync_bound")
    partial = {**doc, "traceEvents": [e for e in doc["traceEvents"] if e.get("name") != "ProfilerStep#6"]}
    traces = []
    for i, name in enumerate(names):
        (root / "run" / name).mkdir(parents=True)
        for r in range(ranks):
            info = {"distributedInfo": {"rank": r, "world_size": ranks}} if ranks > 1 else {}
            trace = save_doc(root / "run" / name / f"rank{r}.pt.trace.json.gz",
                             {**(partial if name in drop_step else doc), **info})
            os.utime(trace, (1e9 + i * 100, 1e9 + i * 100))
            traces.append(trace)
    return traces


def test_the_latest_complete_window_is_found_behind_many_partial_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four partial windows after the complete one: diff compares the window report makes its headline."""
    names = ["window-000004-000006", "window-000010-000012", "window-000020-000022", "window-000030-000032",
             "window-000040-000042"]
    traces = _windows(tmp_path, names, drop_step=frozenset(names[1:]))
    for trace in traces[1:]:  # partial by their sidecars, which are read instead of parsing the traces
        write_sidecar(trace)
        trace.write_bytes(b"\0" * trace.stat().st_size)
    headline = analyze(tmp_path).path
    assert headline.endswith("window-000004-000006")
    assert main(["diff", str(tmp_path), str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    base = json.loads(out)["base"]
    assert (base["window"], base["window_index"], base["complete"], base["skipped"]) == (headline, 4, True, [])
    assert err == ""


def test_a_single_rank_window_that_cannot_be_read_is_skipped_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = _windows(tmp_path, ["window-000004-000006", "window-000014-000016"], ranks=1)
    data = traces[1].read_bytes()
    traces[1].write_bytes(data[: len(data) // 2])
    assert main(["diff", str(tmp_path), str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["base"]["window"].endswith("window-000004-000006")
    assert err.splitlines() == [f"perf-callbacks diff: skipped window {traces[1].parent}: {traces[1]}: truncated file "
                                "(the compressed stream ends early)"]  # not "no profiled events"


def test_a_window_with_an_unreadable_rank_is_skipped_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = _windows(tmp_path, ["window-000004-000006", "window-000014-000016"], ranks=2)
    data = traces[3].read_bytes()
    traces[3].write_bytes(data[: len(data) // 2])
    assert main(["diff", str(tmp_path), str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    base = json.loads(out)["base"]
    assert base["window"].endswith("window-000004-000006") and base["ranks"] == [0, 1] and base["complete"]
    assert err.splitlines() == [f"perf-callbacks diff: skipped window {traces[3].parent}: {traces[3]}: truncated file "
                                "(the compressed stream ends early)"]
    assert main(["diff", str(tmp_path), str(tmp_path), "--window", "window-000014-000016"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has unreadable files" in err and str(traces[3]) in err
    data = traces[1].read_bytes()
    traces[1].write_bytes(data[: len(data) // 2])
    assert main(["diff", str(tmp_path), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perf-callbacks diff: no usable window under") and err.count("\n") == 1

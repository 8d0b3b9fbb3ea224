"""``perf-callbacks diff`` on awkward input and output: a closed pipe, an ASCII-only terminal, a trace nested too deeply
to parse, unreadable or partial windows. Never a traceback, and never exit 1 (which means a regression)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perf_callbacks.cli import main
from tests.analysis.conftest import fixture_trace


def deep_trace(path: Path, depth: int = 100_000) -> Path:
    """A small trace whose one argument is a list nested ``depth`` levels deep (json.loads recurses into it)."""
    arg = "[" * depth + "]" * depth
    path.write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, '
                    f'"dur": 2, "args": {{"device": 0, "deep": {arg}}}}}]}}')
    return path


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
def test_closed_stdout_ends_quietly_with_exit_2(json_out: bool) -> None:
    sync = str(fixture_trace("sync_bound"))
    code, _, err = _cli("diff", sync, sync, *(["--json"] if json_out else []), close_stdout=True)
    assert (code, err) == (2, "")


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

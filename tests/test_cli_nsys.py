from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from perf_callbacks.cli import main

EXPECTED = (
    "nsys profile -t cuda,nvtx,osrt --capture-range=cudaProfilerApi --capture-range-end=stop "
    "-o perf_callbacks --force-overwrite true python train.py --lr 0.1"
)


def test_prints_the_nsys_command_and_how_to_use_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nsys", "--", "python", "train.py", "--lr", "0.1"]) == 0

    out = capsys.readouterr().out
    assert out.splitlines()[0] == EXPECTED
    assert "nsys_capture: true" in out
    assert "nsys_steps: [first, last]" in out
    assert "nsys stats --report nvtx_sum,cuda_gpu_kern_sum perf_callbacks.nsys-rep" in out
    assert 'domain "perf_callbacks"' in out
    assert "torchrun --nproc-per-node=N --no-python nsys profile" in out
    assert "-o 'perf_callbacks.%q{RANK}'" in out
    # every line after the command is a shell comment, so the output can be pasted or sourced
    assert all(line.startswith("#") for line in out.splitlines()[1:] if line)


def test_output_name_and_no_double_dash(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nsys", "-o", "run7", "python", "train.py"]) == 0

    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("-o run7 --force-overwrite true python train.py")


def test_arguments_with_spaces_are_quoted(capsys: pytest.CaptureFixture[str]) -> None:
    main(["nsys", "--", "python", "train.py", "--name", "my run"])

    assert capsys.readouterr().out.splitlines()[0].endswith("python train.py --name 'my run'")


def test_missing_training_command_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nsys", "--"]) == 2
    assert "give the training command after --" in capsys.readouterr().err


def test_run_without_nsys_on_path_fails_clearly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    assert main(["nsys", "--run", "--", "python", "train.py"]) == 127
    err = capsys.readouterr().err
    assert "`nsys` is not on PATH" in err
    assert EXPECTED.replace(" --lr 0.1", "") in err


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake nsys")
def test_run_executes_nsys_and_returns_its_exit_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "nsys"
    fake.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\nexit 3\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    assert main(["nsys", "--run", "--", "python", "train.py", "--lr", "0.1"]) == 3
    assert (tmp_path / "args").read_text().strip() == EXPECTED.removeprefix("nsys ")

"""LightningCLI: the callback, schedule included, configured from a YAML file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lightning.pytorch.cli import LightningCLI

from perf_callbacks import GPUPerfCallback, PerfConfigError
from tests.integrations.lit_helpers import TinyData, TinyModel, profiler_steps, run_cli, write_config


def test_cli_yaml_with_schedule(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, f"""        output_dir: {tmp_path / 'perf'}
        schedule: {{skip_first: 2, wait: 0, warmup: 1, active: 2}}
        record_shapes: true
        data_wait_steps: 1000
""")
    cli = run_cli(cfg)
    (cb,) = [c for c in cli.trainer.callbacks if isinstance(c, GPUPerfCallback)]
    assert cb.config.schedule.active == 2 and cb.config.record_shapes
    (path,) = cb.engine.exported
    assert profiler_steps(path) == [3, 4]


@pytest.mark.parametrize(
    ("init_args", "message"),
    [
        ("schedule: {active: 0}", "schedule.active must be >= 1, got 0"),
        ("schedule: {actve: 2}", "unknown key 'schedule.actve' (did you mean 'schedule.active'?); valid keys: "),
        ("activities: [gpu]", "activities must be 'cpu' and/or 'cuda', got ['gpu']: unknown 'gpu' (did you mean 'cuda'?)"),
        ("ranks: []", "ranks must be a non-empty list of global ranks >= 0, got []; omit ranks (or set it to null) "),
        ("ranks: [0, 0]", "ranks must list each global rank once, got [0, 0] (repeated: [0])"),
        ("max_trace_mb: .nan", "max_trace_mb must be a finite number > 0, got nan"),
        ("data_wait_threshold: .inf", "data_wait_threshold must be a finite number in (0, 1], got inf"),
    ],
)
def test_cli_yaml_bad_value_prints_one_error_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], init_args: str, message: str
) -> None:
    cfg = write_config(tmp_path, f"        {init_args}\n")
    with pytest.raises(SystemExit) as info:
        run_cli(cfg)
    assert info.value.code == 2
    assert isinstance(info.value.__cause__, PerfConfigError)  # kept for anyone who catches SystemExit
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "GPUPerfCallback" in x or "Traceback" in x]
    assert line.startswith(f"error: GPUPerfCallback: {message}")


def test_cli_without_exit_on_error_or_with_debug_raises_our_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = write_config(tmp_path, "        schedule: {active: 0}\n")
    args = ["fit", "--config", str(cfg)]
    with pytest.raises(ValueError, match="Does not validate against any") as info:
        LightningCLI(TinyModel, TinyData, args=args, save_config_callback=None, parser_kwargs={"exit_on_error": False})
    assert "schedule.active must be >= 1, got 0" in str(info.value.__cause__)
    monkeypatch.setenv("JSONARGPARSE_DEBUG", "true")
    with pytest.raises(ValueError, match="Does not validate against any") as info:
        run_cli(cfg)
    assert isinstance(info.value.__cause__, PerfConfigError)


def test_cli_help_lists_the_options_and_not_the_catch_all(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        LightningCLI(TinyModel, TinyData, args=["fit", "--trainer.callbacks.help", "perf_callbacks.GPUPerfCallback"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    # jsonargparse >= 4.3x shows "--trainer.callbacks.record_shapes", 4.27 "--trainer.callbacks.init_args.record_shapes"
    assert re.search(r"--trainer\.callbacks\.(init_args\.)?record_shapes \{true,false\}", out)
    assert "record operator input shapes" in out and "unknown" not in out


def test_cli_yaml_unknown_top_level_key_is_rejected_by_jsonargparse_while_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """jsonargparse checks ``init_args`` keys against the signature before our code runs: its message, not ours."""
    cfg = write_config(tmp_path, "        record_shape: true\n")
    with pytest.raises(SystemExit) as info:
        run_cli(cfg)
    assert info.value.code == 2
    # jsonargparse 4.3x: "Option 'record_shape' is not accepted"; 4.27: 'No action for key "record_shape"'
    assert re.search(r"Option 'record_shape' is not accepted|No action for key \"record_shape\"", capsys.readouterr().err)


@pytest.mark.slow
def test_cli_user_sees_our_line_not_a_traceback(tmp_path: Path) -> None:
    """What a user sees from ``python -c`` with a typo in the YAML: before the fix, 80 stderr lines of tracebacks."""
    cfg = write_config(tmp_path, "        schedule: {actve: 2}\n")
    code = (
        "from lightning.pytorch.cli import LightningCLI\n"
        "from tests.integrations.lit_helpers import TinyData, TinyModel\n"
        f"LightningCLI(TinyModel, TinyData, args=['fit', '--config', {str(cfg)!r}], save_config_callback=None)\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("JSONARGPARSE_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, timeout=300)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) <= 4, proc.stderr
    assert lines[-1].startswith("error: GPUPerfCallback: unknown key 'schedule.actve' (did you mean 'schedule.active'?)")


def documented_blocks() -> list[str]:
    """The jsonargparse messages docs/troubleshooting.md quotes for a top-level typo and a wrong type, in that order."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text()
    entry = text.split("**LightningCLI prints a long usage text", 1)[1].split("\n**", 1)[0]
    return re.findall(r"```\n(.*?)```", entry, flags=re.S)


@pytest.mark.parametrize(("init_args", "block"), [("record_shape: true", 0), ('data_wait_threshold: "10%"', 1)])
def test_cli_top_level_typo_or_wrong_type_prints_what_the_docs_quote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], init_args: str, block: int
) -> None:
    """No supported hook gives our one line here (see docs/troubleshooting.md): the docs quote jsonargparse's lines."""
    quoted = documented_blocks()[block]
    assert init_args.split(":")[0] in quoted
    with pytest.raises(SystemExit) as info:
        run_cli(write_config(tmp_path, f"        {init_args}\n"))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and init_args.split(":")[0] in err
    import jsonargparse

    if tuple(int(x) for x in jsonargparse.__version__.split(".")[:2]) >= (4, 53):  # the version the docs quote
        assert quoted in err  # verbatim, indentation included (4.27, the oldest supported, words it differently)

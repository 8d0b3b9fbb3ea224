"""The README and the docs site cannot drift from the code: their code blocks run or parse, their commands exist.

- Every Python block runs for real on tiny data (the Lightning, Accelerate and transformers quick starts), with the
  names a snippet leaves to the reader (``model``, ``optimizer``, ``loader``, ``ds``) defined by a small prelude.
- Every YAML block loads; a LightningCLI ``init_args`` block builds the callback it configures.
- Every shell block passes ``bash -n``; every ``perf-callbacks`` command names a subcommand and options the CLI has,
  every ``python examples/...`` command a file and options that exist; the documented sample report is re-run.
- Every page linked from the README exists, and every page is in ``mkdocs.yml``'s nav.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def blocks(lang: str) -> list[tuple[str, str]]:
    """``(where, code)`` of every fenced block in the given language, over the README and the docs pages."""
    found = []
    for page in PAGES:
        for match in FENCE.finditer(page.read_text()):
            if match.group(1) == lang:
                line = page.read_text()[: match.start()].count("\n") + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", match.group(2)))
    return found


def commands() -> list[tuple[str, str]]:
    """Shell commands: the lines of bash blocks and the ``$ `` lines of console samples, continuations joined."""
    found = [(where, line) for where, code in blocks("bash") for line in code.replace("\\\n", " ").splitlines()]
    found += [(where, line[2:]) for where, code in blocks("") for line in code.splitlines() if line.startswith("$ ")]
    return [(where, line.split(";")[0].strip()) for where, line in found if line.strip() and not line.startswith("#")]


PY_IDS = [where for where, _ in blocks("python")]


@pytest.mark.parametrize(("where", "code"), blocks("python"), ids=PY_IDS)
def test_python_blocks_run(where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ast.parse(code, where)
    monkeypatch.chdir(tmp_path)  # ./perf, "out" and lightning_logs land here
    namespace: dict[str, Any] = {}
    if "accelerate import" in code:
        exec(ACCELERATE_PRELUDE, namespace)
    elif "transformers import" in code:
        exec(TRANSFORMERS_PRELUDE, namespace)
    try:
        exec(compile(code, where, "exec"), namespace)
    finally:
        if "accelerate import" in code or "transformers import" in code:
            from accelerate.state import AcceleratorState, GradientState

            AcceleratorState._reset_state(True)
            GradientState._reset_state()


@pytest.mark.parametrize(("where", "code"), blocks("yaml"), ids=[w for w, _ in blocks("yaml")])
def test_yaml_blocks_load_and_configure(where: str, code: str) -> None:
    doc = yaml.safe_load(code)
    for callback in (doc.get("trainer") or {}).get("callbacks", []):
        module, _, name = callback["class_path"].rpartition(".")
        assert module == "perf_callbacks", where
        import perf_callbacks

        getattr(perf_callbacks, name)(**callback.get("init_args", {}))  # a wrong key raises PerfConfigError


@pytest.mark.parametrize(("where", "code"), blocks("bash"), ids=[w for w, _ in blocks("bash")])
def test_bash_blocks_parse(where: str, code: str) -> None:
    result = subprocess.run(["bash", "-n"], input=code, text=True, capture_output=True, check=False)
    assert result.returncode == 0, f"{where}: {result.stderr}"


def test_documented_commands_exist(capsys: pytest.CaptureFixture[str]) -> None:
    from perf_callbacks.cli import main

    checked = 0
    for where, line in commands():
        words = shlex.split(line)
        if words[0] == "perf-callbacks" and not any("[" in w for w in words):  # a synopsis has [--options]
            with pytest.raises(SystemExit):
                main([words[1], "--help"])
            options = capsys.readouterr().out
            for word in words[2:]:
                if word.startswith("--"):
                    assert word.split("=")[0] in options, f"{where}: {line}"
            checked += 1
        elif words[0] in ("python", "python3") and words[1].startswith("examples/"):
            source = (ROOT / words[1]).read_text()
            for i, word in enumerate(words[2:], start=2):
                if word.startswith("--"):
                    assert f'"{word}"' in source, f"{where}: {line}"
                if words[i - 1] == "--config":
                    assert (ROOT / word).is_file(), f"{where}: {line}"
            checked += 1
    assert checked >= 5


@pytest.mark.slow
def test_the_sample_report_is_what_report_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """The console sample in reading-the-output.md, re-run: its verdict and figures lines, word for word."""
    from perf_callbacks.cli import main

    page = (DOCS / "reading-the-output.md").read_text()
    sample = next(code for _, code in blocks("") if code.startswith("$ perf-callbacks report tests/data/"))
    assert sample in page
    command, *expected = sample.splitlines()
    assert main(shlex.split(command)[2:]) == 0
    printed = capsys.readouterr().out.splitlines()
    for line in expected[:5]:  # header, verdict, utilization, step time, memory
        assert line in printed


def test_every_page_linked_from_the_readme_exists_and_every_page_is_in_the_nav() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", readme)
    assert links, "the README links into the docs"
    for link in links:
        assert (ROOT / link).is_file(), link
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in DOCS.rglob("*.md"):
        name = page.relative_to(DOCS).as_posix()
        assert f": {name}\n" in nav, name


ACCELERATE_PRELUDE = """
import torch
from torch import nn
from types import SimpleNamespace

class TinyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def forward(self, x, y):
        return SimpleNamespace(loss=nn.functional.mse_loss(self.net(x), y))

model = TinyModel()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader([{"x": torch.randn(4), "y": torch.randn(1)} for _ in range(32)], batch_size=4)
"""

TRANSFORMERS_PRELUDE = """
import torch
from torch import nn

class TinyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def forward(self, x, labels):
        return {"loss": nn.functional.mse_loss(self.net(x), labels)}

model = TinyModel()
ds = [{"x": torch.randn(4), "labels": torch.randn(1)} for _ in range(32)]
"""

"""In CI only tests marked ``gpu`` may skip: the rule in ``tests/conftest.py``, checked on small test files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")

EXAMPLES = '''
import pytest

@pytest.mark.gpu
def test_gpu_only():
    pytest.skip("needs CUDA")

def test_plain_skip():
    pytest.skip("no C compiler")

@pytest.mark.skipif(True, reason="needs chromium")
def test_skipif():
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_xfail():
    assert False

def test_passes():
    pass
'''

MODULE_SKIP = '''
import pytest
pytest.importorskip("a_module_that_is_not_installed")

def test_hidden():
    pass
'''


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    shutil.copy(CONFTEST, pytester.path / "conftest.py")
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs CUDA\n")
    pytester.makepyfile(test_examples=EXAMPLES, test_module_skip=MODULE_SKIP)
    return pytester


def test_outside_ci_skips_are_skips(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=4, xfailed=1)  # one whole module skipped
    assert result.ret == pytest.ExitCode.OK


def test_in_ci_a_skip_not_marked_gpu_fails_the_run(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    result = suite.runpytest("-p", "no:cacheprovider", "-rfE", "test_examples.py")
    result.assert_outcomes(passed=1, skipped=1, failed=1, errors=1, xfailed=1)  # a skip at setup fails as an error
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "FAILED test_examples.py::test_plain_skip*unexpected skip in CI*no C compiler*",
        "ERROR test_examples.py::test_skipif*unexpected skip in CI*needs chromium*",
    ])


def test_in_ci_a_module_skipped_at_import_fails_the_run(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    result = suite.runpytest("-p", "no:cacheprovider", "test_module_skip.py")
    result.assert_outcomes(errors=1)
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error stops the whole run
    result.stdout.fnmatch_lines(["*unexpected skip in CI*a_module_that_is_not_installed*"])


def test_in_ci_a_gpu_skip_alone_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(CONFTEST, pytester.path / "conftest.py")
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs CUDA\n")
    pytester.makepyfile(test_gpu="import pytest\n\n@pytest.mark.gpu\ndef test_cuda():\n    pytest.skip('no CUDA')\n")
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    assert result.ret == pytest.ExitCode.OK


def test_ci_script_runs_the_readme_test_command_in_ci_mode() -> None:
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    script = (root / ".ci" / "run").read_text().splitlines()
    command = next(line for line in script if line.startswith("python3 -m venv"))
    assert f"```bash\n{command}\n```" in readme  # the README's test command, word for word
    assert 'export CI="${CI:-true}"' in script
    assert "exit 1" in "\n".join(script)  # a missing compiler or Chromium stops CI instead of skipping tests


def test_only_tests_foreign_reads_beside_the_repository() -> None:
    """A plain clone has no ``../shared``: the one module that looks there is ``tests/foreign.py``, whose mark skips
    with the reason outside CI. A test that built its own path to ``shared`` would fail in a plain clone."""
    tests = Path(__file__).parent
    offenders = [str(p.relative_to(tests)) for p in tests.rglob("*.py")
                 if p.name not in ("foreign.py", Path(__file__).name) and '"shared"' in p.read_text()]
    assert offenders == []


def _tests_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    tests = tmp_path / "tests"
    for name, text in files.items():
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text(text)
    return tests


def test_only_analysis_tests_that_reach_no_framework_skip_the_oldest_releases_pass(tmp_path: Path) -> None:
    from tests.frameworks import touches_frameworks

    tests = _tests_tree(tmp_path, {
        "helper.py": "import accelerate\n",
        "quiet.py": "import json\n",
        "analysis/test_free.py": "import json\nfrom tests.quiet import x\n",
        "analysis/test_direct.py": "def test():\n    import lightning\n",
        "analysis/test_through_helper.py": "from tests.helper import thing\n",
        "analysis/test_engine.py": "from perf_callbacks.core.engine.engine import PerfEngine\n",
        "core/test_core.py": "import json\n",
        "test_cli_report.py": "import json\n",
        "test_cli_diff.py": "import json\n",
    })
    marked = {p.relative_to(tests).as_posix() for p in tests.rglob("test_*.py") if touches_frameworks(p, tests)}
    assert marked == {"analysis/test_direct.py", "analysis/test_through_helper.py", "analysis/test_engine.py",
                      "core/test_core.py", "test_cli_diff.py"}


def test_the_oldest_releases_pass_runs_the_tests_marked_frameworks() -> None:
    ci = (Path(__file__).parents[1] / ".ci" / "run").read_text()
    oldest = [line for line in ci.splitlines() if "oldest.txt" in line and "pytest" in line]
    assert len(oldest) == 1 and '-m "frameworks and (gpu or not gpu)"' in oldest[0]


LIGHTNING_CTRL_C = '''
import signal, sys

def test_fit_interrupted():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what Lightning's fit does on Ctrl-C, before sys.exit(1)
    sys.exit(1)

def test_after():
    pass
'''

SIGINT_LEFT_IGNORED = '''
import signal

def test_leaves_sigint_ignored():
    signal.signal(signal.SIGINT, signal.SIG_IGN)

def test_after():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
'''


def test_one_ctrl_c_in_a_lightning_fit_stops_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(CONFTEST.parents[1]))  # the conftest's plugins are in this repository
    shutil.copy(CONFTEST, pytester.path / "conftest.py")
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs CUDA\n")
    pytester.makepyfile(test_fit=LIGHTNING_CTRL_C)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*"])
    result.stdout.no_fnmatch_line("*test_after PASSED*")


def test_a_test_that_leaves_sigint_ignored_gets_the_handler_back(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(CONFTEST.parents[1]))
    shutil.copy(CONFTEST, pytester.path / "conftest.py")
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs CUDA\n")
    pytester.makepyfile(test_ignored=SIGINT_LEFT_IGNORED)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)

"""Test-session rules: ``gpu`` tests skip without CUDA, and in CI no other test may skip.

In CI (``CI=true``, as GitHub Actions and ``.ci/run`` set it) a skipped test that is not marked ``gpu`` is reported
as a failure, and so is a test module skipped at import: a missing C compiler, Chromium or test dependency must
fail the run, not hide the tests that need it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import torch

pytest_plugins = ["pytester", "tests.small_fs"]  # small_fs: a real full disk (a 64 KiB tmpfs)


def in_ci() -> bool:
    """Whether the tests run in CI, where only ``gpu`` tests may skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "frameworks: touches a release .ci/oldest.txt pins (tests/frameworks.py)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        if _touches_frameworks(item.path):
            item.add_marker("frameworks")


def _touches_frameworks(path: Any) -> bool:
    """The ``frameworks`` mark's rule (``tests/frameworks.py``); every test outside this repository's tests has it."""
    try:
        from tests.frameworks import touches_frameworks
    except ImportError:  # a copy of this file elsewhere (tests/test_ci_skips.py)
        return True
    return touches_frameworks(Path(path))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    """One Ctrl-C stops the run, even inside a Lightning fit.

    On Ctrl-C, Lightning's ``fit`` sets SIGINT to be ignored ("disable KeyboardInterrupt for shutdown") and exits
    with ``SystemExit(1)``: the test failed and every later Ctrl-C was swallowed. A test that leaves SIGINT ignored
    gets its handler back, and one that ended that way with ``SystemExit`` is the user's Ctrl-C: the run stops.
    """
    before = signal.getsignal(signal.SIGINT)
    outcome = yield
    if before is signal.SIG_IGN or signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return
    signal.signal(signal.SIGINT, before if before is not None else signal.default_int_handler)
    excinfo = outcome.excinfo
    if excinfo is not None and issubclass(excinfo[0], SystemExit):
        raise KeyboardInterrupt("Ctrl-C during a Lightning fit (it exited with SystemExit and ignored SIGINT)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and in_ci() and "gpu" not in item.keywords:
        report.outcome = "failed"
        report.longrepr = f"unexpected skip in CI (only tests marked gpu may skip): {_reason(report.longrepr)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if report.skipped and in_ci() and "gpu" not in collector.keywords:
        report.outcome = "failed"
        report.longrepr = f"unexpected skip in CI (only tests marked gpu may skip): {_reason(report.longrepr)}"


def _reason(longrepr: Any) -> str:
    """The reason of a skip report: pytest stores ``(path, line, "Skipped: reason")``."""
    return str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


@pytest.fixture(autouse=True)
def _accelerate_environment() -> Generator[None, None, None]:
    """Each test leaves the ``ACCELERATE_*`` environment as it found it.

    transformers 4.x's ``TrainingArguments`` writes its choices there (``torch_compile=True`` sets
    ``ACCELERATE_DYNAMO_BACKEND``), and every later ``Accelerator`` in the process read them: the models of the tests
    after one compiled run were compiled too.
    """
    before = {k: v for k, v in os.environ.items() if k.startswith("ACCELERATE_")}
    yield
    for key in [k for k in os.environ if k.startswith("ACCELERATE_") and k not in before]:
        del os.environ[key]
    os.environ.update(before)

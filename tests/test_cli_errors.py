"""What the command says when it cannot go on: one line with the cause, and an exit code that says whose it is.

A missing or unreadable path and a bad option exit 2; storage that cannot be reached, or refuses or lacks the
credentials, exits 3; only a bug in perf-callbacks says "internal error" (exit 70). Usage errors are one line that
points to ``--help``, not argparse's usage block. ``file://`` URLs, which training takes as ``output_dir``, are local
paths to ``report`` and ``diff`` too.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from perf_callbacks.cli import EXIT_FAILED, EXIT_INTERNAL, EXIT_REMOTE, main
from tests.analysis.conftest import fixture_trace
from tests.s3_server import S3Server, s3_fixture  # noqa: F401 - the fixture


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as done:  # argparse
        code = int(done.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.mark.parametrize(("args", "says"), [
    (["report"], "perf-callbacks report: error: the following arguments are required: path "
                 "(see: perf-callbacks report --help)"),
    (["report", "x", "--top", "0"], "perf-callbacks report: error: argument --top: must be >= 1, got 0 "
                                    "(see: perf-callbacks report --help)"),
    (["report", "x", "--timeout", "soon"], "perf-callbacks report: error: argument --timeout: not a number of "
                                           "seconds: 'soon' (see: perf-callbacks report --help)"),
    (["diff", "a"], "perf-callbacks diff: error: the following arguments are required: new "
                    "(see: perf-callbacks diff --help)"),
    (["repor", "x"], "perf-callbacks: error: argument command: invalid choice: 'repor' (choose from 'report', 'diff', "
                     "'nsys', 'capture') (see: perf-callbacks --help)"),
])
def test_a_usage_error_is_one_line_with_the_way_to_help(capsys: pytest.CaptureFixture[str], args: list[str],
                                                        says: str) -> None:
    code, out, err = _run(capsys, *args)
    assert (code, out, err) == (EXIT_FAILED, "", says + "\n")


def _corrupt(tmp_path: Path) -> Path:
    bad = tmp_path / "rank0.pt.trace.json.gz"
    bad.write_bytes(fixture_trace("sync_bound").read_bytes()[:1000])
    return bad


@pytest.mark.parametrize("command", ["report", "diff"])
@pytest.mark.parametrize(("kind", "says"), [
    ("missing", "no trace file or folder at"),
    ("corrupt", "truncated file (the compressed stream ends early)"),
    ("under_a_file", "no trace file or folder at"),
])
def test_a_bad_local_path_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
                                             kind: str, says: str) -> None:
    path = {"missing": lambda: tmp_path / "missing", "corrupt": lambda: _corrupt(tmp_path),
            "under_a_file": lambda: _corrupt(tmp_path) / "rank0"}[kind]()
    code, out, err = _run(capsys, command, *[str(path)] * (2 if command == "diff" else 1))
    assert code == EXIT_FAILED and out == ""
    assert err.count("\n") == 1 and says in err and "internal error" not in err, err


def _refused_endpoint() -> str:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there now: connections are refused


@pytest.mark.parametrize("command", ["report", "diff"])
def test_an_unreachable_endpoint_is_one_line_exit_3(capsys: pytest.CaptureFixture[str], command: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    options = json.dumps({"client_kwargs": {"endpoint_url": _refused_endpoint(), "region_name": "us-east-1"},
                          "config_kwargs": {"retries": {"max_attempts": 1}}, "skip_instance_cache": True})
    code, out, err = _run(capsys, command, *["s3://perf-refused/perf"] * (2 if command == "diff" else 1),
                          "--storage-options", options, "--timeout", "0")
    assert code == EXIT_REMOTE and out == ""
    assert err.startswith(f"perf-callbacks {command}: cannot read s3://perf-refused/perf: EndpointConnectionError: "
                          "Could not connect to the endpoint URL"), err
    assert err.count("\n") == 1


def test_missing_credentials_are_one_line_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance metadata lookup
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    options = json.dumps({"client_kwargs": {"endpoint_url": _refused_endpoint(), "region_name": "us-east-1"},
                          "skip_instance_cache": True})
    code, out, err = _run(capsys, "report", "s3://perf-nokeys/perf", "--storage-options", options)
    assert (code, out) == (EXIT_REMOTE, "")
    assert err == "perf-callbacks report: cannot read s3://perf-nokeys/perf: NoCredentialsError: Unable to locate " \
                  "credentials\n"


def test_refused_credentials_are_one_line_exit_3(s3: S3Server, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import moto.settings

    s3.fs().mkdir("perf-denied")
    s3.fs().pipe("perf-denied/perf/trace.json", b"{}")
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # the server checks the keys from now on
    options = json.dumps({"client_kwargs": s3.options["client_kwargs"], "skip_instance_cache": True})
    code, out, err = _run(capsys, "report", "s3://perf-denied/perf", "--storage-options", options)
    assert (code, out) == (EXIT_REMOTE, "")
    assert err == "perf-callbacks report: cannot read s3://perf-denied/perf: PermissionError: The AWS Access Key Id " \
                  "you provided does not exist in our records.\n"


def test_storage_options_the_back_end_refuses_are_one_line_exit_2(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    options = json.dumps({"client_kwargs": {"endpoint_url": _refused_endpoint()}, "retries": 1, "secret": "s3cr3t",
                          "skip_instance_cache": True})
    code, out, err = _run(capsys, "report", "s3://perf-options/perf", "--storage-options", options)
    assert (code, out) == (EXIT_FAILED, "")
    assert err.startswith("perf-callbacks report: the storage options are not accepted for s3://perf-options/perf: ")
    assert "unexpected keyword argument" in err and "s3cr3t" not in err and err.count("\n") == 1


def test_only_a_bug_says_internal_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import perf_callbacks.analysis as analysis

    def broken(*_: object, **__: object) -> str:
        raise KeyError("verdict")  # what a bug in the text report would raise

    monkeypatch.setattr(analysis, "format_text", broken)
    code, out, err = _run(capsys, "report", str(fixture_trace("sync_bound")))
    assert (code, out) == (EXIT_INTERNAL, "")
    assert err == "perf-callbacks report: internal error (KeyError: 'verdict'); please report it with the trace\n"


@pytest.mark.parametrize("command", ["report", "diff"])
def test_file_urls_are_local_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """``file:///...`` is what training takes as ``output_dir``: the commands read the same folder."""
    folder = tmp_path / "perf" / "run" / "window-000004-000006"
    folder.mkdir(parents=True)
    shutil.copy(fixture_trace("sync_bound"), folder / "rank0.pt.trace.json.gz")
    root = tmp_path / "perf"
    plain = _run(capsys, command, *[str(root)] * (2 if command == "diff" else 1))
    url = _run(capsys, command, *[f"file://{root}"] * (2 if command == "diff" else 1))
    assert plain[0] == url[0] == 0
    assert url == plain and "sync_bound" in url[1]

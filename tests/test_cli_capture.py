"""``perf-callbacks capture``: it writes only into a live run's folder, never over a file it did not write, and a
remote folder within ``--timeout`` (issue 54, part 4)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from perf_callbacks.cli import EXIT_FAILED, EXIT_OK, EXIT_REMOTE, main
from perf_callbacks.config import ScheduleConfig
from perf_callbacks.core.triggers.captures import MAX_REQUEST_STEPS, CaptureSchedule
from perf_callbacks.core.triggers.live import LiveMarker
from perf_callbacks.core.triggers.requests import REQUEST_FILE, FileRequests, local_reader
from perf_callbacks.core.triggers.schedule import Schedule
from tests.s3_server import S3Server, s3_fixture  # noqa: F401 - the fixture
from tests.silent_server import SilentServer, silent_fixture  # noqa: F401 - the fixture

RUN = "20260101-120000-abcdef"


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_a_plain_folder_is_refused_and_the_users_file_is_left(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / REQUEST_FILE).write_text("my own notes\n")
    assert main(["capture", str(tmp_path), "--steps", "2"]) == EXIT_FAILED
    err = capsys.readouterr()
    assert err.out == "" and "is not a live run's folder" in one_line(err.err)
    assert (tmp_path / REQUEST_FILE).read_text() == "my own notes\n"
    assert main(["capture", str(tmp_path / "nowhere")]) == EXIT_FAILED
    assert "is not a folder" in one_line(capsys.readouterr().err)


def test_a_finished_runs_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run that ended removed its marker; one killed outright left a stale one: neither is live."""
    marker = LiveMarker(RUN, 0, 2.0, folder=tmp_path)
    marker.beat()
    path = tmp_path / marker.name
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "t": data["t"] - 600}))
    assert main(["capture", str(tmp_path)]) == EXIT_FAILED
    assert "is not a live run's folder" in one_line(capsys.readouterr().err)
    assert not (tmp_path / REQUEST_FILE).exists()


def test_a_live_run_gets_the_request_and_the_message_names_who_reads_it(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
    files = FileRequests([local_reader(tmp_path / REQUEST_FILE), local_reader(tmp_path / RUN / REQUEST_FILE)], s,
                         every_s=0.02, marker=LiveMarker(RUN, 1, 0.02, folder=tmp_path))
    files.start()
    try:
        deadline = time.monotonic() + 10
        while main(["capture", str(tmp_path), "--steps", "3"]) != EXIT_OK and time.monotonic() < deadline:
            time.sleep(0.02)  # refused until the thread's first look wrote the marker
        out = capsys.readouterr().out
        request_id = out.split("capture request ", 1)[1].split()[0]
        assert one_line(out) == (f"perf-callbacks: capture request {request_id} written to {tmp_path}/capture: 1 "
                                 f"live rank(s) of run {RUN} look for it every 0.02 s and record a window of 3 steps "
                                 "from their next step")
        while not s.pending and time.monotonic() < deadline:
            time.sleep(0.01)
        assert list(s.pending) == [("file", request_id, 3, None)]
        (tmp_path / RUN).mkdir()
        assert main(["capture", str(tmp_path / RUN)]) == EXIT_OK  # the run's folder in the output_dir
        assert (tmp_path / RUN / REQUEST_FILE).is_file()
        (tmp_path / REQUEST_FILE).write_text("not a request")
        assert main(["capture", str(tmp_path)]) == EXIT_FAILED  # a live run's folder, a file that is not ours
        assert "exists and is not a capture request" in one_line(capsys.readouterr().err)
        assert (tmp_path / REQUEST_FILE).read_text() == "not a request"
    finally:
        files.close()


def test_steps_beyond_the_cap_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["capture", str(tmp_path), "--steps", str(MAX_REQUEST_STEPS + 1)])
    assert stop.value.code == EXIT_FAILED
    assert f"must be an integer from 1 to {MAX_REQUEST_STEPS}" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("how", ["--timeout", "env"])
def test_a_silent_endpoint_ends_within_the_timeout(how: str, silent: SilentServer, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    timeout_s = 2.0
    options = ["--storage-options", json.dumps({"client_kwargs": {"endpoint_url": silent.endpoint}})]
    if how == "env":
        monkeypatch.setenv("PERF_CALLBACKS_TIMEOUT", str(timeout_s))
    else:
        options += ["--timeout", str(timeout_s)]
    t0 = time.monotonic()
    code = main(["capture", "s3://bucket/perf", *options])
    took = time.monotonic() - t0
    assert code == EXIT_REMOTE and silent.accepted >= 1
    assert f"timed out after {timeout_s:g} s" in one_line(capsys.readouterr().err)
    assert timeout_s <= took < timeout_s + 2.0, took  # fsspec cancels the request at the deadline


def test_a_remote_folder_without_a_live_run_is_refused_and_a_live_one_written(
        s3: S3Server, capsys: pytest.CaptureFixture[str]) -> None:
    fs = s3.fs()
    fs.mkdir("perf-cli")
    fs.pipe_file("perf-cli/perf/capture", b"someone else's")
    options = ["--storage-options", json.dumps(s3.options), "--timeout", "30"]
    assert main(["capture", "s3://perf-cli/perf", *options]) == EXIT_FAILED
    assert "is not a live run's folder" in one_line(capsys.readouterr().err)
    from perf_callbacks.core.triggers.request_files import LazyFs

    marker = LiveMarker(RUN, 0, 2.0, remote=LazyFs("s3://perf-cli/perf", s3.options))
    marker.beat()
    assert main(["capture", "s3://perf-cli/perf", *options]) == EXIT_FAILED
    assert "exists and is not a capture request" in one_line(capsys.readouterr().err)
    assert s3.fs().cat_file("perf-cli/perf/capture") == b"someone else's"
    s3.fs().rm_file("perf-cli/perf/capture")
    assert main(["capture", "s3://perf-cli/perf", "--steps", "2", *options]) == EXIT_OK
    assert "1 live rank(s) of run" in one_line(capsys.readouterr().out)
    assert json.loads(s3.fs().cat_file("perf-cli/perf/capture"))["steps"] == 2
    marker.remove()
    assert not s3.fs().glob("perf-cli/perf/.perf-callbacks-live-*")

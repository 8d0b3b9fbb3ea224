"""A request file in a remote ``output_dir`` (moto's S3): read through fsspec, as the uploads reach it."""

from __future__ import annotations

import time

import pytest

from perf_callbacks.cli import main
from perf_callbacks.config import ScheduleConfig
from perf_callbacks.core.triggers.captures import CaptureSchedule
from perf_callbacks.core.triggers.live import LiveMarker
from perf_callbacks.core.triggers.request_files import LazyFs
from perf_callbacks.core.triggers.requests import FileRequests, remote_reader, write_request
from perf_callbacks.core.triggers.schedule import Schedule
from tests.s3_server import S3Server, s3_fixture  # noqa: F401 - the fixture


def test_a_request_in_a_remote_output_dir_is_served_once(s3: S3Server, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    s3.fs().mkdir("perf-capture")
    url = "s3://perf-capture/perf"
    write_request(url, storage_options=s3.options)  # there before the run: old
    s = CaptureSchedule(Schedule(ScheduleConfig(skip_first=1000)))
    far = LazyFs(url, s3.options)
    files = FileRequests([remote_reader(far)], s, every_s=0.02, marker=LiveMarker("run-a", 0, 0.02, remote=far))
    files.start()
    try:
        deadline = time.monotonic() + 10
        while not s3.fs().glob("perf-capture/perf/.perf-callbacks-live-*") and time.monotonic() < deadline:
            time.sleep(0.02)  # the marker is there after the thread's first look
        assert not s.pending
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)  # the command reads the endpoint from the environment
        assert main(["capture", url, "--steps", "3"]) == 0
        request_id = capsys.readouterr().out.split("capture request ", 1)[1].split()[0]
        deadline = time.monotonic() + 10
        while not s.pending and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # read again several times since: still one
        assert list(s.pending) == [("file", request_id, 3, None)]
    finally:
        files.close()
    assert not s3.fs().glob("perf-capture/perf/.perf-callbacks-live-*")  # removed as the thread ended

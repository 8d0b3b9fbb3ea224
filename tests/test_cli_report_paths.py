"""``perf-callbacks report`` given what is not a trace: one file's reason said once, a TensorBoard event file or a
folder without traces named for what it is, with where perf-callbacks writes its traces."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from perf_callbacks.cli import EXIT_FAILED, main

WHERE = "<log_dir>/perf"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def _tfevents(path: Path) -> Path:
    """A TensorBoard event file as TensorBoard writes it: TFRecords, the first an Event with ``brain.Event:2``."""
    event = b"\x09" + struct.pack("<d", 1796131199.5) + b"\x1a\x0dbrain.Event:2"
    record = struct.pack("<Q", len(event)) + b"\0" * 4 + event + b"\0" * 4
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record * 3)
    return path


def test_one_unreadable_file_is_named_once_with_its_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text('{"traceEvents": [1, 2')
    code, out, err = _run(capsys, str(bad))
    assert code == EXIT_FAILED and out == ""
    assert err.startswith(f"perf-callbacks report: {bad}: invalid JSON ("), err
    assert err.count(str(bad)) == 1 and "no profiled events" not in err


def test_several_unreadable_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.pt.trace.json").write_text('{"traceEvents": [1, 2')
    code, _, err = _run(capsys, str(tmp_path))
    assert code == EXIT_FAILED
    assert err.startswith(f"perf-callbacks report: none of the 2 trace files under {tmp_path} could be read: "), err
    assert "no profiled events" not in err and err.count(str(tmp_path)) == 3


@pytest.mark.parametrize("name", ["events.out.tfevents.1796131199.host.4242.0", "renamed.bin"])
def test_a_tensorboard_event_file_is_named_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    events = _tfevents(tmp_path / name)
    code, out, err = _run(capsys, str(events))
    assert code == EXIT_FAILED and out == ""
    assert err.startswith(f"perf-callbacks report: {events} is a TensorBoard event file, not a trace; "), err
    assert WHERE in err and "JSON" not in err and "utf-32" not in err


def test_a_binary_file_is_not_called_invalid_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blob = tmp_path / "rank0.pt.trace.json"
    blob.write_bytes(bytes(range(7, 256)) * 4)
    _, _, err = _run(capsys, str(blob))
    assert "binary content, not JSON text" in err and "utf-32" not in err, err


def test_a_folder_without_traces_says_where_they_are(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "lightning_logs" / "version_0"
    _tfevents(logs / "events.out.tfevents.1796131199.host.4242.0")
    code, _, err = _run(capsys, str(logs))
    assert code == EXIT_FAILED
    assert "(it holds 1 TensorBoard event file: metrics, not traces)" in err and WHERE in err, err
    empty = tmp_path / "empty"
    empty.mkdir()
    _, _, err = _run(capsys, str(empty))
    assert err.startswith(f"perf-callbacks report: no .json or .json.gz file under {empty}; ") and WHERE in err, err

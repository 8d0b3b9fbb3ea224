"""``perf-callbacks report URL`` and ``diff URL URL`` on a real S3 server (moto, loopback): sidecars first.

``diff`` parses the windows it compares, so it downloads their traces whole.

A 64-rank window whose every trace has its sidecar is reported from the sidecars alone (no request for any trace
object), with the same text as the report of the same folder on local disk; a file no sidecar names has its first
64 KiB read; a window missing a sidecar gets its traces downloaded whole, as the report then parses them.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis.sidecar import write_sidecar
from perf_callbacks.cli import main
from perf_callbacks.cli.remote_read import HEAD_BYTES, _keep_mtime
from tests.analysis.conftest import fixture_trace
from tests.bad_inputs import SilentServer
from tests.s3_server import S3Server, s3_fixture  # noqa: F401 - the fixture

RANKS = 64
WINDOW = "run/window-000004-000006"


def _run(tmp_path: Path, ranks: int = RANKS) -> Path:
    """An output_dir holding one window of ``ranks`` copies of one trace, each with its sidecar."""
    folder = tmp_path / "perf" / WINDOW
    folder.mkdir(parents=True)
    first = folder / "rank0.pt.trace.json.gz"
    shutil.copy(fixture_trace("launch_bound_tiny_kernels"), first)
    side = write_sidecar(first, {"window": [4, 6], "partial": False})
    for rank in range(1, ranks):
        shutil.copy(first, folder / f"rank{rank}.pt.trace.json.gz")
        side.update(trace=f"rank{rank}.pt.trace.json.gz")
        side["rank"]["rank"] = rank
        (folder / f"rank{rank}.summary.json").write_text(json.dumps(side))
    return tmp_path / "perf"


def _upload(s3: S3Server, local: Path, bucket: str, *names: str) -> str:
    """Copy the run folder ``local`` to ``bucket/<name>`` for each name; the --storage-options that reach the server."""
    fs = s3.fs()
    fs.mkdir(bucket)
    for name in names:
        fs.put(str(local) + "/", f"{bucket}/{name}", recursive=True)
    return json.dumps({"client_kwargs": s3.options["client_kwargs"]})


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["report", *args])
    return code, capsys.readouterr().out


def _trace_gets(s3: S3Server) -> tuple[int, int]:
    """GETs of trace objects: (whole, first bytes only)."""
    gets = [rng for method, path, rng in s3.requests if method == "GET" and path.endswith(".pt.trace.json.gz")]
    head = f"bytes=0-{HEAD_BYTES - 1}"
    return sum(1 for r in gets if r is None or r != head), sum(1 for r in gets if r == head)


def _trace_requests(s3: S3Server) -> list[tuple[str, str, str | None]]:
    return [r for r in s3.requests if r[1].endswith(".pt.trace.json.gz")]


def test_report_of_a_64_rank_run_on_s3_reads_sidecars_and_no_trace(tmp_path: Path, s3: S3Server,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    local = _run(tmp_path)
    options = _upload(s3, local, "perf-report", "perf")
    code, here = _report(capsys, str(local))
    s3.requests.clear()
    remote_code, there = _report(capsys, "s3://perf-report/perf", "--storage-options", options, "--jobs", "4")
    assert code == remote_code == 0
    assert f"{RANKS} ranks" in here
    assert there == here.replace(str(local), "s3://perf-report/perf")
    assert _trace_requests(s3) == []  # the sidecars name the traces: nothing of them is read


def test_a_window_without_all_its_sidecars_gets_its_traces_whole(tmp_path: Path, s3: S3Server,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    local = _run(tmp_path, ranks=2)
    (local / WINDOW / "rank1.summary.json").unlink()  # the report parses this window
    options = _upload(s3, local, "perf-parse", "perf")
    _, here = _report(capsys, str(local))
    s3.requests.clear()
    _, there = _report(capsys, "s3://perf-parse/perf", "--storage-options", options)
    assert there == here.replace(str(local), "s3://perf-parse/perf")
    assert _trace_gets(s3) == (2, 1)  # a look at the one no sidecar names, then both whole


def test_diff_of_two_remote_runs(tmp_path: Path, s3: S3Server, capsys: pytest.CaptureFixture[str]) -> None:
    local = _run(tmp_path, ranks=2)
    options = _upload(s3, local, "perf-diff", "a", "b")
    assert main(["diff", str(local), str(local), "--windows"]) == 0  # a URL's side is read as windows
    here = capsys.readouterr().out
    assert main(["diff", "s3://perf-diff/a", "s3://perf-diff/b", "--storage-options", options, "--windows"]) == 0
    there = capsys.readouterr().out
    assert there.replace("s3://perf-diff/a", str(local)).replace("s3://perf-diff/b", str(local)) == here


def test_report_of_a_url_with_nothing_there_says_so(s3: S3Server, capsys: pytest.CaptureFixture[str]) -> None:
    s3.fs().mkdir("perf-empty")
    options = json.dumps({"client_kwargs": s3.options["client_kwargs"]})
    assert main(["report", "s3://perf-empty/perf", "--storage-options", options]) == 2
    assert "no file under s3://perf-empty/perf" in capsys.readouterr().err


def test_a_file_no_sidecar_names_is_still_looked_at(tmp_path: Path, s3: S3Server,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Sidecars are trusted for the traces they name; other files are read to tell what they are."""
    local = _run(tmp_path, ranks=4)
    (local / WINDOW / "config.json").write_text(json.dumps({"lr": 0.1}))  # not a trace: left out, as locally
    (local / "run" / "window-000008-000010").mkdir()
    shutil.copy(fixture_trace("launch_bound_tiny_kernels"), local / "run" / "window-000008-000010" / "trace.json.gz")
    options = _upload(s3, local, "perf-mixed", "perf")
    _, here = _report(capsys, str(local))
    s3.requests.clear()
    _, there = _report(capsys, "s3://perf-mixed/perf", "--storage-options", options)
    assert "config.json" in here and "window-000008-000010" in here
    assert there == here.replace(str(local), "s3://perf-mixed/perf")
    assert _trace_requests(s3) == []  # the window with sidecars: none of its traces read
    looked_at = {path.rsplit("/", 1)[1] for method, path, _ in s3.requests if method == "GET"}
    assert {"config.json", "trace.json.gz"} <= looked_at


@pytest.mark.parametrize(("info", "expected"), [
    ({"LastModified": datetime.datetime(2026, 12, 1, 12, 0, 1, tzinfo=datetime.timezone.utc)}, 1796126401.0),
    ({"updated": "2026-12-01T12:00:01.000Z", "created": 5.0}, 1796126401.0),  # gcsfs: ISO text
    ({"mtime": 1796126401.5}, 1796126401.5),
    ({"size": 3}, 0.0),  # no time: all alike, windows ordered by name, never by which download ended first
])
def test_a_mirrored_file_keeps_the_objects_time(tmp_path: Path, info: dict[str, Any], expected: float) -> None:
    dest = tmp_path / "rank0.pt.trace.json.gz"
    dest.write_bytes(b"")
    _keep_mtime(dest, info)
    assert dest.stat().st_mtime == expected


def test_diff_of_two_remote_runs_downloads_only_the_windows_it_compares(tmp_path: Path, s3: S3Server,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    local = _run(tmp_path, ranks=2)
    older = local / "run" / "window-000001-000003"  # an older complete window, with its sidecars: not compared
    shutil.copytree(local / WINDOW, older)
    for side in older.glob("*.summary.json"):  # the sidecars of that window name it (as a run's own do)
        side.write_text(json.dumps({**(data := json.loads(side.read_text())), "meta": {**data["meta"], "window": [1, 3]}}))
    for f in older.iterdir():
        os.utime(f, (1e9, 1e9))
    options = _upload(s3, local, "perf-diff-some", "a", "b")
    # On the server a window's time is its upload's (one second's resolution), and a recursive put uploads in no set
    # order: upload the compared window again a second later, so that it is the newest there, as it is here
    time.sleep(1.1)
    for side in "ab":
        s3.fs().put(str(local / WINDOW) + "/", f"perf-diff-some/{side}/{WINDOW}", recursive=True)
    assert main(["diff", str(local), str(local), "--windows"]) == 0
    here = capsys.readouterr().out
    s3.requests.clear()
    assert main(["diff", "s3://perf-diff-some/a", "s3://perf-diff-some/b", "--storage-options", options,
                 "--windows"]) == 0
    there = capsys.readouterr().out
    assert there.replace("s3://perf-diff-some/a", str(local)).replace("s3://perf-diff-some/b", str(local)) == here
    assert WINDOW in here
    got = sorted(path.split("/", 3)[2:] for method, path, _ in s3.requests  # type: ignore[misc]
                 if method == "GET" and path.endswith(".pt.trace.json.gz"))
    assert got == [[side, f"{WINDOW}/rank{r}.pt.trace.json.gz"] for side in "ab" for r in (0, 1)], got
    assert main(["diff", str(local), str(local), "--window", "1"]) == 0
    here = capsys.readouterr().out
    s3.requests.clear()
    assert main(["diff", "s3://perf-diff-some/a", "s3://perf-diff-some/b", "--window", "1", "--storage-options",
                 options]) == 0
    there = capsys.readouterr().out
    assert there.replace("s3://perf-diff-some/a", str(local)).replace("s3://perf-diff-some/b", str(local)) == here
    got = sorted(path.split("/", 3)[2:] for method, path, _ in s3.requests  # type: ignore[misc]
                 if method == "GET" and path.endswith(".pt.trace.json.gz"))
    assert got == [[side, f"run/window-000001-000003/rank{r}.pt.trace.json.gz"] for side in "ab" for r in (0, 1)]


@pytest.mark.parametrize("command", ["report", "diff"])
@pytest.mark.parametrize("given", ["option", "environment"])
def test_a_storage_that_never_answers_ends_at_the_timeout(s3: S3Server, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch, command: str,
                                                          given: str) -> None:
    """An endpoint that accepts and never answers: the command gives up after --timeout (botocore alone: 850 s)."""
    import threading
    import time

    from perf_callbacks.cli import EXIT_REMOTE

    bound = 2.0
    silent = SilentServer(life_s=60)
    options = json.dumps({"client_kwargs": {"endpoint_url": silent.endpoint}, "skip_instance_cache": True})
    args = [command, "s3://perf-hung/perf", *(["s3://perf-hung/other"] if command == "diff" else []),
            "--storage-options", options]
    if given == "option":
        args += ["--timeout", f"{bound:g}"]
    else:
        monkeypatch.setenv("PERF_CALLBACKS_TIMEOUT", f"{bound:g}")
    codes: list[int] = []
    t0 = time.monotonic()
    runner = threading.Thread(target=lambda: codes.append(main(args)), daemon=True)
    runner.start()
    runner.join(timeout=10 * bound)
    elapsed = time.monotonic() - t0
    silent.close()
    assert not runner.is_alive(), f"still waiting after {elapsed:.0f} s with a {bound:g} s bound"
    assert elapsed >= bound
    err = capsys.readouterr().err
    assert codes == [EXIT_REMOTE]
    assert err == (f"perf-callbacks {command}: timed out after 2 s reading s3://perf-hung/perf: the storage did not "
                   "answer in time (raise --timeout or $PERF_CALLBACKS_TIMEOUT; 0: no bound)\n")


@pytest.mark.parametrize("how", ["nan_utilization", "flops_text", "another_window", "more_steps"])
def test_a_damaged_sidecar_on_s3_gets_its_trace_read(tmp_path: Path, s3: S3Server, capsys: pytest.CaptureFixture[str],
                                                     how: str) -> None:
    """A sidecar that is not believed locally is not believed remotely: its trace, whose name says nothing of a
    trace, is downloaded and parsed, and the report is the local one of the trace itself."""
    import gzip

    from tests.analysis.sidecar_damage import CONTRADICTIONS, damage

    folder = tmp_path / "perf" / WINDOW
    folder.mkdir(parents=True)
    trace = folder / "rank0.json"
    trace.write_bytes(gzip.decompress(fixture_trace("sync_bound").read_bytes()))
    side = write_sidecar(trace, {"window": [4, 6], "partial": False, "steps": [4, 5, 6], "rank": 0})
    damage(side, how, tmp_path)
    (folder / "rank0.summary.json").write_text(json.dumps(side))
    options = _upload(s3, tmp_path / "perf", f"perf-damaged-{how.replace('_', '-')}", "perf")
    code, here = _report(capsys, str(tmp_path / "perf"), "--no-sidecars")
    url = f"s3://perf-damaged-{how.replace('_', '-')}/perf"
    remote_code, there = _report(capsys, url, "--storage-options", options)
    assert code == remote_code == 0
    aside = re.compile(r"note: rank0\.summary\.json set aside \(a value of the wrong type, or one no trace gives: "
                       r"not finite, negative or out of range\); its trace was parsed\n\n?")
    assert bool(aside.search(there)) is (how not in CONTRADICTIONS)  # damage is noted, a contradiction is not
    assert aside.sub("", there) == here.replace(str(tmp_path / "perf"), url)
    assert "verdict: sync_bound" in there


def test_report_no_sidecars_of_a_url_downloads_and_parses_every_trace(tmp_path: Path, s3: S3Server,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Every trace has its sidecar, but ``--no-sidecars`` asks for the traces: both downloaded whole, none looked at
    first, and the text is that of the local folder parsed without sidecars."""
    local = _run(tmp_path, ranks=2)
    options = _upload(s3, local, "perf-nosidecars", "perf")
    _, here = _report(capsys, str(local), "--no-sidecars")
    s3.requests.clear()
    code, there = _report(capsys, "s3://perf-nosidecars/perf", "--storage-options", options, "--no-sidecars")
    assert code == 0 and there == here.replace(str(local), "s3://perf-nosidecars/perf")
    assert _trace_gets(s3) == (2, 0)

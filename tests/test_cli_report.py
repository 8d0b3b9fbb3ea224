"""``perf-callbacks report`` on malformed input: one line on stderr naming the file and the reason, the documented exit
code, and never a traceback. Also ``--version``, ``--help`` and ``--html`` path checks."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks import __version__
from perf_callbacks.cli import EXIT_FAILED, EXIT_OK, EXIT_PARTIAL, main
from tests.analysis.conftest import fixture_trace, load_doc, save_doc


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def _truncated(path: Path) -> Path:
    data = fixture_trace("sync_bound").read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def test_truncated_gzip_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _truncated(tmp_path / "rank0.pt.trace.json.gz")
    code, out, err = _run(capsys, str(trace))
    assert code == EXIT_FAILED
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert str(trace) in err and "truncated file" in err


def test_truncated_window_inside_an_output_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An older window holds a truncated rank file: it is skipped with one line, the rest is reported, exit 1."""
    old, new = tmp_path / "run" / "window-000002-000004", tmp_path / "run" / "window-000012-000014"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    bad = _truncated(old / "rank1.pt.trace.json.gz")
    shutil.copy(fixture_trace("sync_bound"), old / "rank0.pt.trace.json.gz")
    shutil.copy(fixture_trace("compute_bound"), new / "rank0.pt.trace.json.gz")
    os.utime(old / "rank0.pt.trace.json.gz", (1000, 1000))
    os.utime(bad, (1000, 1000))
    code, out, err = _run(capsys, str(tmp_path))
    assert code == EXIT_PARTIAL
    assert err.strip().splitlines() == [
        f"perf-callbacks report: skipped {bad}: truncated file (the compressed stream ends early)"
    ]
    assert f"perf-callbacks report: {new}\nverdict: compute_bound" in out
    assert f"{old}: sync_bound" in out  # the readable rank of the older window is still analysed


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("not_objects", EXIT_OK),
        ("string_ts", EXIT_OK),
        ("missing_ts", EXIT_OK),
        ("nan_ts", EXIT_OK),
        ("all_bad", EXIT_FAILED),
    ],
)
def test_malformed_events(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, expected: int) -> None:
    doc = load_doc("sync_bound")
    events: list[Any] = doc["traceEvents"]
    kernel = next(i for i, e in enumerate(events) if e.get("cat") == "kernel")
    if change == "not_objects":
        events[:0] = [1, "x", None, [2]]
    elif change == "string_ts":
        events[kernel] = {**events[kernel], "ts": "12.5"}
    elif change == "missing_ts":
        events[kernel] = {k: v for k, v in events[kernel].items() if k != "ts"}
    elif change == "nan_ts":
        events[kernel] = {**events[kernel], "ts": float("nan")}
    else:
        doc["traceEvents"] = [{**e, "ts": "x"} for e in events if isinstance(e, dict)]
    trace = save_doc(tmp_path / "rank0.json", doc)
    code, out, err = _run(capsys, str(trace))
    assert code == expected
    assert "nan%" not in out
    if expected == EXIT_OK:
        assert "verdict: sync_bound" in out
        assert "malformed events skipped" in out
    else:
        assert err.count("\n") == 1 and str(trace) in err and "no profiled events" in err


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"[1, 2, 3]", "malformed"),
        (b"42", "top level is a JSON int"),
        (b'{"traceEvents": 5}', "traceEvents is a int"),
        (b"{not json", "invalid JSON"),
    ],
)
def test_bad_top_level(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, reason: str) -> None:
    trace = tmp_path / "t.json"
    trace.write_bytes(content)
    code, _, err = _run(capsys, str(trace))
    assert code == EXIT_FAILED
    assert len(err.strip().splitlines()) == 1
    assert str(trace) in err and (reason in err or "no profiled events" in err)


def test_html_path_checked_before_analysis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no" / "such" / "report.html"
    code, out, err = _run(capsys, str(tmp_path / "no-trace-here"), "--html", str(missing))
    assert code == EXIT_FAILED
    assert err == f"perf-callbacks report: cannot write --html {missing}: folder {missing.parent} does not exist\n"
    code, _, err = _run(capsys, str(fixture_trace("sync_bound")), "--html", str(tmp_path))
    assert code == EXIT_FAILED and "it is a folder" in err


def test_html_says_where_it_wrote_and_shows_every_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, window in (("sync_bound", "window-000002-000004"), ("compute_bound", "window-000012-000014")):
        (tmp_path / window).mkdir()
        shutil.copy(fixture_trace(name), tmp_path / window / "rank0.pt.trace.json.gz")
    page = tmp_path / "r.html"
    code, _, err = _run(capsys, str(tmp_path), "--html", str(page))
    assert code == EXIT_OK
    assert err == f"perf-callbacks report: wrote {page.resolve()}\n"
    html = page.read_text()
    assert "window-000002-000004" in html and "window-000012-000014" in html
    assert "sync_bound" in html and "compute_bound" in html


def test_json_has_the_new_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(fixture_trace("sync_bound")), "--json")
    data = json.loads(out)
    assert code == EXIT_OK
    assert {"verdict_margin", "runner_up", "devices", "errors", "notes", "partial"} <= data.keys()
    assert data["verdict_margin"] == pytest.approx(data["ranks"][0]["losses"]["sync"] - 0.10)
    assert data["runner_up"] == "compute_bound"


def test_version_and_plain_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"perf-callbacks {__version__}\n"
    for argv in (["--help"], ["report", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        text = capsys.readouterr().out
        assert "``" not in text and ":func:" not in text and ":mod:" not in text
    assert "exit codes:" in text and "partial" in text


def test_help_names_every_subcommand_with_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """``perf-callbacks --help`` opens with one usage line per subcommand (it listed report and nsys, not diff)."""
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    usage = [line.split()[1] for line in text.splitlines() if line.startswith("  perf-callbacks ")]
    assert usage == ["report", "diff", "nsys", "capture"]


def test_console_script_never_shows_a_traceback(tmp_path: Path) -> None:
    """The real entry point, in a subprocess, on a gzip file that is not gzip."""
    bad = tmp_path / "rank0.pt.trace.json.gz"
    bad.write_bytes(b"this is not gzip at all")
    with gzip.open(tmp_path / "rank1.pt.trace.json.gz", "wt") as f:
        f.write("[]")
    done = subprocess.run([sys.executable, "-m", "perf_callbacks.cli", "report", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stderr
    assert done.returncode == EXIT_FAILED
    assert f"{bad}: not a valid gzip file" in done.stderr
    assert "rank1.pt.trace.json.gz: no profiled events" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_randomly_damaged_events_never_raise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Keys removed or given the wrong type in 5% of a real trace's events: a report or one line, never a traceback."""
    import random

    rng = random.Random(0)
    original = load_doc("sync_bound")
    junk: list[Any] = [None, "x", -1, 1e308, [], {}, float("inf"), True]
    for i in range(12):
        events = [dict(e) for e in original["traceEvents"]]
        for e in rng.sample(events, len(events) // 20):
            key = rng.choice(sorted(e))
            if rng.random() < 0.5:
                del e[key]
            else:
                e[key] = rng.choice(junk)
        trace = save_doc(tmp_path / f"rank{i}.json", {**original, "traceEvents": events})
        code, out, err = _run(capsys, str(trace))
        assert code in (EXIT_OK, EXIT_FAILED)
        assert "internal error" not in err and "malformed events (" not in err
        assert (code == EXIT_OK and "verdict: " in out) or (code == EXIT_FAILED and err.count("\n") == 1)


def test_one_file_nested_too_deeply_is_skipped_and_the_rest_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.analysis.result_helpers import deep_trace

    deep = deep_trace(tmp_path / "a.json")
    shutil.copy(fixture_trace("sync_bound"), tmp_path / "rank0.pt.trace.json.gz")
    code, out, err = _run(capsys, str(tmp_path))
    assert code == EXIT_PARTIAL
    assert err.strip().splitlines() == [
        f"perf-callbacks report: skipped {deep}: invalid JSON (nested too deeply to parse)"
    ]
    assert "verdict: sync_bound" in out


@pytest.mark.parametrize("json_out", [False, True])
def test_closed_stdout_ends_quietly(json_out: bool) -> None:
    """`perf-callbacks report T | head -1`: no traceback, nothing on stderr, the documented failure code."""
    cmd = [sys.executable, "-m", "perf_callbacks.cli", "report", str(fixture_trace("sync_bound"))]
    proc = subprocess.Popen(cmd + (["--json"] if json_out else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()
    err = proc.communicate(timeout=120)[1]
    assert (proc.returncode, err.decode()) == (141, "")  # 128 + SIGPIPE, as a shell reports for Unix tools


def test_report_json_loads_no_renderer_it_does_not_print(tmp_path: Path) -> None:
    """``report --json`` renders no text and no page: the text report's, the HTML's and the diff's modules stay unloaded
    (start-up is most of a small trace's report), while the text report loads its renderer."""
    probe = ("import runpy, sys; sys.argv = ['perf-callbacks', 'report', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('perf_callbacks.cli', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith(('perf_callbacks.analysis.html', "
             "'perf_callbacks.analysis.render.text', 'perf_callbacks.analysis.diff.text'))), file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    trace = str(fixture_trace("sync_bound"))
    runs = {flag: subprocess.run([sys.executable, "-c", probe, trace, *flag], capture_output=True, text=True,
                                 timeout=120, check=False, env=env) for flag in ((), ("--json",))}
    as_json = runs[("--json",)]
    assert json.loads(as_json.stdout)["verdict"] == "sync_bound"
    assert as_json.stderr.strip().splitlines()[-1] == "[]"
    assert "perf_callbacks.analysis.render.text" in runs[()].stderr  # the probe sees what the text report loads

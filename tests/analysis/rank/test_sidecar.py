"""Sidecar summaries, partial windows, ``jobs``, verdict margins and TensorBoard scalars."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import AnalysisResult, analyze, format_text, read_sidecar, render_html, sidecar_path
from perf_callbacks.analysis.judge.verdict import verdict_margin
from perf_callbacks.analysis.sidecar import FORMAT, write_sidecar
from tests.analysis.conftest import fixture_trace, load_doc, save_doc
from tests.analysis.sidecar_damage import CONTRADICTIONS, DAMAGE, damage


def _window(root: Path, name: str, fixture: str, rank: int = 0, mtime: float | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / f"rank{rank}.pt.trace.json.gz"
    shutil.copy(fixture_trace(fixture), trace)
    if mtime is not None:
        os.utime(trace, (mtime, mtime))
    return trace


def test_sidecar_contract(tmp_path: Path) -> None:
    trace = _window(tmp_path, "window-000004-000006", "sync_bound", rank=3)
    meta = {"window": [4, 6], "partial": False, "interrupted": None, "steps": [4, 5, 6], "overhead_ms": 1.5}
    data = write_sidecar(trace, meta, top_k=2)
    assert sidecar_path(trace) == trace.with_name("rank3.summary.json")
    on_disk = json.loads(sidecar_path(trace).read_text())
    assert on_disk == json.loads(json.dumps(data))
    assert on_disk["format"] == FORMAT == "perf-callbacks-sidecar/7"
    assert on_disk["trace"] == trace.name and on_disk["trace_bytes"] == trace.stat().st_size
    assert on_disk["meta"] == meta
    direct = analyze(trace, sidecars=False)
    assert on_disk["text"] == format_text(direct, top_k=2)
    assert on_disk["scalars"] == pytest.approx(direct.scalars())
    assert on_disk["rank"]["rank"] == 3 and on_disk["rank"]["verdict"] == "sync_bound"
    assert read_sidecar(trace) == on_disk
    assert [p.name for p in trace.parent.iterdir() if p.name.startswith(".")] == []  # the temp file was renamed


def test_report_uses_sidecars_without_reading_the_trace(tmp_path: Path) -> None:
    """With a matching sidecar the trace is not parsed: garbling it (same size) changes nothing."""
    trace = _window(tmp_path, "window-000004-000006", "sync_bound")
    write_sidecar(trace)
    direct = analyze(trace, sidecars=False)
    trace.write_bytes(b"\0" * trace.stat().st_size)
    via = analyze(tmp_path)
    assert via.verdict == direct.verdict == "sync_bound"
    assert via.gpu_utilization == pytest.approx(direct.gpu_utilization)
    assert via.ranks[0].losses == pytest.approx(direct.ranks[0].losses)
    assert via.top_ops == direct.top_ops
    assert via.scalars() == pytest.approx(direct.scalars())
    assert format_text(via).splitlines()[1:] == format_text(direct).splitlines()[1:]
    assert via.errors == []
    with pytest.raises(ValueError, match="not a valid gzip"):
        analyze(tmp_path, sidecars=False)


def test_stale_sidecar_is_ignored(tmp_path: Path) -> None:
    trace = _window(tmp_path, "window-000004-000006", "sync_bound")
    write_sidecar(trace)
    shutil.copy(fixture_trace("compute_bound"), trace)  # a new trace under the same name
    assert read_sidecar(trace) is None
    assert analyze(tmp_path).verdict == "compute_bound"
    sidecar_path(trace).write_text("{not json")
    assert read_sidecar(trace) is None


def test_sidecar_command(tmp_path: Path) -> None:
    trace = _window(tmp_path, "w", "sync_bound", rank=1)
    ok = subprocess.run([sys.executable, "-m", "perf_callbacks.analysis.sidecar", str(trace), "--meta",
                         '{"partial": true}', "--top-k", "3"], capture_output=True, text=True, timeout=120, check=False)
    assert (ok.returncode, ok.stderr) == (0, "")
    assert json.loads(sidecar_path(trace).read_text())["meta"] == {"partial": True}
    bad = tmp_path / "w" / "rank2.pt.trace.json.gz"
    bad.write_bytes(fixture_trace("sync_bound").read_bytes()[:5000])
    failed = subprocess.run([sys.executable, "-m", "perf_callbacks.analysis.sidecar", str(bad)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr and "truncated" in failed.stderr
    written = json.loads((tmp_path / "w" / "rank2.summary.json").read_text())
    assert "truncated" in written["error"] and "rank" not in written


def _cut_to_one_step(trace: Path) -> None:
    doc = load_doc("sync_bound")
    keep = [e for e in doc["traceEvents"] if e.get("name") not in ("ProfilerStep#5", "ProfilerStep#6")]
    save_doc(trace, {**doc, "traceEvents": keep})


def test_partial_window_is_never_the_headline(tmp_path: Path) -> None:
    full = _window(tmp_path / "run", "window-000004-000006", "compute_bound", mtime=1000)
    late = _window(tmp_path / "run", "window-000007-000009", "sync_bound", mtime=2000)
    _cut_to_one_step(late)
    os.utime(late, (2000, 2000))
    result = analyze(tmp_path)
    assert result.path == str(full.parent) and not result.partial
    assert result.windows[1] == {**result.windows[1], "path": str(late.parent), "partial": True}
    assert f"  {late.parent} (partial): " in format_text(result)


def test_partial_from_sidecar_meta_not_from_text(tmp_path: Path) -> None:
    """The engine's record (the sidecar's meta) says whether a window is partial; summary.txt is text for people and
    is never read back (a window without meta is judged by its steps against its name)."""
    full = _window(tmp_path / "run", "window-000004-000006", "compute_bound", mtime=1000)
    late = _window(tmp_path / "run", "window-000007-000009", "sync_bound", mtime=2000)
    write_sidecar(late, {"partial": True})
    assert analyze(tmp_path).path == str(full.parent)
    sidecar_path(late).unlink()
    assert analyze(tmp_path).path == str(late.parent)  # three steps, as its name promises
    (late.parent / "summary.txt").write_text("perf-callbacks summary: steps 7-9, rank 0 (partial window: 2 of 3)\n")
    assert analyze(tmp_path).path == str(late.parent)


def test_jobs_give_the_same_result(tmp_path: Path) -> None:
    """Three 10 MB traces: enough JSON (over MIN_PARALLEL_BYTES) for worker processes to start."""
    for rank in range(3):
        _window(tmp_path, "window-000004-000006", "compute_bound", rank=rank)
    one = analyze(tmp_path, jobs=1)
    many = analyze(tmp_path, jobs=3)
    assert [r.rank for r in many.ranks] == [0, 1, 2]
    assert many.to_dict() == one.to_dict()


def test_verdict_margin_and_runner_up() -> None:
    close = verdict_margin({"input": 0.104, "host": 0.03})
    assert close.margin == pytest.approx(0.004)
    assert close.runner_up == "compute_bound"
    assert close.note == "input 10.4%, close to the 10% threshold"
    under = verdict_margin({"input": 0.085, "sync": 0.01})
    assert under.runner_up == "input_bound" and "close to the 10% threshold" in under.note
    near = verdict_margin({"host": 0.30, "communication": 0.28})
    assert (near.runner_up, near.note) == ("communication_bound", "host 30.0%, close to communication 28.0%")
    assert verdict_margin({"input": 0.6, "host": 0.2}).note == ""


def _close_result() -> AnalysisResult:
    r = analyze(fixture_trace("sync_bound"))
    r.verdict, r.verdict_note = "input_bound", "input 10.4%, close to the 10% threshold"
    return r


def test_close_verdict_in_text_and_html() -> None:
    r = _close_result()
    assert "verdict: input_bound (input 10.4%, close to the 10% threshold)" in format_text(r)
    page = render_html(r)
    assert '<p class="verdict close">input_bound (input 10.4%, close to the 10% threshold)</p>' in page
    r.verdict_note = ""
    assert '<p class="verdict">input_bound</p>' in render_html(r)


def test_scalars_have_no_duplicate_tags() -> None:
    scalars: dict[str, Any] = analyze(fixture_trace("input_bound")).scalars()
    assert "perf/window/input_idle_fraction" not in scalars
    assert scalars["perf/window/data_wait_fraction"] == pytest.approx(1674.5 / 1683.9, abs=0.01)
    assert "perf/window/unexplained_idle_fraction" in scalars


def test_sidecars_are_used_only_when_every_rank_has_one(tmp_path: Path) -> None:
    first = _window(tmp_path, "window-000004-000006", "sync_bound", rank=0)
    second = _window(tmp_path, "window-000004-000006", "sync_bound", rank=1)
    write_sidecar(first)
    first.write_bytes(b"\0" * first.stat().st_size)  # readable only through its sidecar
    result = analyze(tmp_path)  # rank 1 has no sidecar: the whole window is parsed
    assert [r.rank for r in result.ranks] == [1]
    assert len(result.errors) == 1 and "not a valid gzip" in result.errors[0]
    write_sidecar(second)
    result = analyze(tmp_path)
    assert [r.rank for r in result.ranks] == [0, 1] and result.errors == []


def _corrupt(side: dict[str, Any], how: str) -> None:
    rank = side["rank"]
    if how == "rank_dict":
        rank["rank"] = {"rank": 0}
    elif how == "step_text":
        rank["steps"][0]["step"] = "x"
    elif how == "missing_field":
        del rank["losses"]
    elif how == "op_name":
        rank["top_ops"][0]["name"] = 1
    elif how == "verdict":
        rank["verdict"] = "fast"
    elif how == "bool_number":
        rank["span_ms"] = True
    elif how == "meta_list":
        side["meta"] = ["partial"]
    else:
        side["rank"] = []


@pytest.mark.parametrize(
    "how", ["rank_dict", "step_text", "missing_field", "op_name", "verdict", "bool_number", "meta_list", "not_dict"]
)
def test_malformed_sidecar_is_ignored_and_the_trace_parsed(tmp_path: Path, how: str) -> None:
    """A sidecar that matches its trace's name and size but holds nonsense is ignored like a stale one."""
    from perf_callbacks.analysis.rank.collect import load_all

    trace = _window(tmp_path, "window-000004-000006", "sync_bound")
    side = write_sidecar(trace)
    assert load_all([[trace]])[trace].meta == {}  # a sound sidecar is used
    _corrupt(side, how)
    sidecar_path(trace).write_text(json.dumps(side))
    loaded = load_all([[trace]])[trace]
    assert loaded.meta is None and loaded.result is not None  # parsed from the trace
    result = analyze(tmp_path)
    assert result.verdict == "sync_bound" and result.errors == [] and result.ranks[0].rank == 0


def test_sidecar_of_a_rank_with_two_devices_is_used(tmp_path: Path) -> None:
    doc = load_doc("sync_bound")
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"][::3]
    doc["traceEvents"] += [{**e, "args": {**e["args"], "device": 1, "correlation": -5}} for e in ops]
    trace = save_doc(tmp_path / "rank0.pt.trace.json", doc)
    write_sidecar(trace)
    direct = analyze(trace, sidecars=False)
    trace.write_bytes(b"\0" * trace.stat().st_size)
    via = analyze(tmp_path)
    assert len(via.devices) == 2 and via.devices == direct.devices


def test_a_file_its_sidecar_names_is_a_trace_without_being_read(tmp_path: Path) -> None:
    """What a remote report's mirror holds: a trace named by its matching sidecar, its bytes never downloaded."""
    import gzip

    folder = tmp_path / "window-000004-000006"
    folder.mkdir()
    trace = folder / "rank0.json"  # nothing in the name says it is a trace: only its start, or its sidecar
    trace.write_bytes(gzip.decompress(fixture_trace("sync_bound").read_bytes()))
    write_sidecar(trace)
    direct = analyze(trace, sidecars=False)
    trace.write_bytes(b"\0" * trace.stat().st_size)
    assert analyze(tmp_path).verdict == direct.verdict == "sync_bound"
    with pytest.raises(FileNotFoundError, match="none is a trace"):
        analyze(tmp_path, sidecars=False)


@pytest.mark.parametrize("how", list(DAMAGE))
def test_an_edited_sidecar_is_not_believed_through_the_cli(tmp_path: Path, how: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A sidecar with a value no trace gives (text, NaN, out of range) or that contradicts its trace's place is set
    aside: report, report --html and diff print the trace's own figures, never 'internal error', nan or a negative."""
    from perf_callbacks.cli import main

    run = tmp_path / "perf"
    trace = _window(run / "run", "window-000004-000006", "sync_bound")
    side = write_sidecar(trace, {"window": [4, 6], "partial": False, "steps": [4, 5, 6], "rank": 0})
    damage(side, how, tmp_path)
    sidecar_path(trace).write_text(json.dumps(side))  # NaN and Infinity as Python's json writes them
    outputs = {}
    for name, args in {"report": ["report", str(run)], "html": ["report", str(run), "--html", str(tmp_path / "a.html")],
                       "diff": ["diff", str(run), str(run)]}.items():
        assert main(args) == 0, name
        outputs[name] = capsys.readouterr()
    page = (tmp_path / "a.html").read_text()
    sidecar_path(trace).unlink()  # the trace's own figures
    assert main(["report", str(run), "--html", str(tmp_path / "b.html")]) == 0
    parsed = capsys.readouterr()
    assert main(["diff", str(run), str(run)]) == 0
    diffed = capsys.readouterr()
    for captured in outputs.values():
        text = captured.out + captured.err
        assert "internal error" not in text and " -5" not in text
        assert not {"nan", "nan%", "inf", "infinity"} & set(text.lower().replace("(", " ").split())
    aside = re.compile(r"note: rank0\.summary\.json set aside \(a value of the wrong type, or one no trace gives: "
                       r"not finite, negative or out of range\); its trace was parsed\n\n?")
    assert bool(aside.search(outputs["report"].out)) is (how not in CONTRADICTIONS)  # a contradiction is no damage
    assert aside.sub("", outputs["report"].out) == aside.sub("", outputs["html"].out) == parsed.out
    assert "verdict: sync_bound" in parsed.out
    page = re.sub(r"<h2>Notes</h2><ul><li>rank0\.summary\.json set aside [^<]*</li></ul>\n?", "", page)
    assert page == (tmp_path / "b.html").read_text().replace("b.html", "a.html")
    assert outputs["diff"].out == diffed.out

"""2-process DDP (strategy="ddp", accelerator="cpu", devices=2, gloo) in a subprocess."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

from tests.integrations.ddp_helpers import launch, run_ddp
from tests.integrations.lit_helpers import profiler_steps

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def test_one_trace_per_rank_per_window(tmp_path: Path) -> None:
    results = run_ddp(tmp_path)
    runs = list((tmp_path / "perf").iterdir())
    assert len(runs) == 1, "both ranks must agree on the run folder"
    windows = sorted(p.name for p in runs[0].iterdir() if p.name != "report.html" and not p.name.startswith("steps-"))
    assert windows == ["window-000003-000004", "window-000006-000007"]
    assert {p.name for p in runs[0].glob("steps-rank*.f32")} == {"steps-rank0.f32", "steps-rank1.f32"}  # per rank
    assert (runs[0] / "report.html").is_file()  # the run's page, next to its windows
    for w in windows:
        files = sorted(p.name for p in (runs[0] / w).glob("*.pt.trace.json*"))
        assert files == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
        assert profiler_steps(runs[0] / w / "rank1.pt.trace.json.gz") == profiler_steps(runs[0] / w / "rank0.pt.trace.json.gz")
    assert [len(r["exported"]) for r in results] == [2, 2]
    assert all(not any("ShardingWarning" in w for w in r["warnings"]) for r in results)


def test_fast_in_memory_loader_is_not_input_bound(tmp_path: Path) -> None:
    """Lightning's per-step SIGTERM broadcast runs between batches: it is framework time, never data wait."""
    from perf_callbacks.analysis import analyze

    results = run_ddp(tmp_path, "--in-memory")
    assert all(not any("DataLoaderWarning" in w for w in r["warnings"]) for r in results)
    (run,) = (tmp_path / "perf").iterdir()
    windows = sorted(run.glob("window-*"))
    assert len(windows) == 2
    for window in windows:
        result = analyze(window)
        assert result.verdict != "input_bound", (window.name, result.verdict, result.data_wait_fraction)
        # a loaded runner may preempt the loader's next(): a wait the window then explains by its measured contention
        assert result.data_wait_fraction < 0.2 or result.verdict == "cpu_contention", (
            window.name, result.verdict, result.data_wait_fraction)
        assert len(result.ranks) == 2
        for trace in window.glob("rank*.pt.trace.json.gz"):  # the data_wait spans are the loader's next() alone
            _assert_waits_hold_the_loader_alone(trace)


_BROADCASTS_SIGTERM = hasattr(_TrainingEpochLoop, "_broadcast_sigterm_tensor")  # Lightning 2.5+, at every step


def _inside(event: dict, outer: dict, slack_us: float = 1.0) -> bool:
    return (event.get("tid") == outer.get("tid") and event["ts"] >= outer["ts"] - slack_us
            and event["ts"] + event.get("dur", 0) <= outer["ts"] + outer["dur"] + slack_us)


def _assert_waits_hold_the_loader_alone(trace: Path) -> None:
    """Every op inside a data_wait span runs inside the loader's ``next()``; the broadcast runs in framework time.

    Checked by nesting in the trace, not by durations: on a loaded runner a preemption can land anywhere in a span.
    """
    events = [e for e in json.load(gzip.open(trace))["traceEvents"] if e.get("ph") == "X"]
    named = lambda name: [e for e in events if e.get("name") == name]  # noqa: E731
    waits, framework = named("perf_callbacks.data_wait"), named("perf_callbacks.framework")
    loader = [e for e in events if str(e.get("name", "")).startswith("enumerate(DataLoader)")]
    broadcasts = named("c10d::broadcast_")
    assert waits and framework, trace.name
    assert broadcasts or not _BROADCASTS_SIGTERM, trace.name  # Lightning 2.4 has no per-step broadcast
    for wait in waits:
        fetches = [e for e in loader if _inside(e, wait)]
        assert len(fetches) == 1, (trace.name, wait["ts"], len(fetches))
        fetch = fetches[0]
        stray = [e["name"] for e in events if e is not wait and _inside(e, wait) and not _inside(e, fetch)]
        assert not stray, (trace.name, stray)
    for broadcast in broadcasts:  # Lightning's SIGTERM broadcast: never data wait, always framework time
        assert not any(_inside(broadcast, wait) for wait in waits), trace.name
        assert any(_inside(broadcast, span) for span in framework), trace.name


def test_unsharded_loader_warns_once_on_rank_zero(tmp_path: Path) -> None:
    results = run_ddp(tmp_path, "--no-distributed-sampler")
    rank0 = [w for w in results[0]["warnings"] if w.startswith("ShardingWarning")]
    assert len(rank0) == 1
    assert "not sharded across the 2 ranks" in rank0[0] and "use_distributed_sampler=False" in rank0[0]
    assert results[1]["warnings"] == []


@pytest.mark.parametrize("fail_rank", [0, 1])
def test_one_rank_raising_mid_window_hangs_no_rank(tmp_path: Path, fail_rank: int) -> None:
    """The run ends (no hang inside the callback) and the failing rank's partial window trace is on disk."""
    proc = launch(tmp_path, "--fail-rank", str(fail_rank))  # subprocess.run's timeout fails the test on a hang
    assert proc.returncode != 0
    assert "user error at step 4" in proc.stderr
    (run,) = (tmp_path / "perf").iterdir()
    written = sorted(p.name for p in (run / "window-000003-000004").glob("*.pt.trace.json*"))
    assert f"rank{fail_rank}.pt.trace.json.gz" in written
    assert profiler_steps(run / "window-000003-000004" / f"rank{fail_rank}.pt.trace.json.gz")[0] == 3


def test_a_failing_rank_leaves_the_healthy_rank_free_to_exit(tmp_path: Path) -> None:
    """Rank 1 fails at step 4 and stays alive; rank 0, still training, leaves through the 5 s process-group timeout."""
    results = run_ddp(tmp_path, "--fail-rank", "1", "--linger")
    r0, r1 = results
    assert r1["error"] == "ValueError: user error at step 4"
    assert r0["error"] is not None and r0["error"].startswith(("RuntimeError", "DistBackendError")), r0["error"]
    assert r0["time"] - r1["time"] < 30  # the timeout, not a hang
    (run,) = (tmp_path / "perf").iterdir()
    written = sorted(p.name for p in (run / "window-000003-000004").glob("*.pt.trace.json*"))
    assert written == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]  # both partial windows flushed
    assert profiler_steps(run / "window-000003-000004" / "rank0.pt.trace.json.gz")[0] == 3

"""A resumed run's redone steps, from step records written next to each other (fed rows, fed times)."""

from __future__ import annotations

import json
import os
from array import array
from pathlib import Path
from typing import Any

from perf_callbacks.analysis.diff.steps import read_record
from perf_callbacks.analysis.ledger.resume import find_resumed


def write(run: Path, steps: list[int], time_s: float, closed: bool = True, mtime: float = 0.0,
          open_step: dict[str, Any] | None = None) -> Path:
    """A rank-0 record of ``steps`` (each ``time_s``) in ``run``, its description last written at ``mtime``."""
    run.mkdir(parents=True)
    rows = array("f", [v for s in steps for v in (s, time_s, 8, 0.0, 0.0, 0)])
    path = run / "steps-rank0.f32"
    path.write_bytes(rows.tobytes())
    ledger: dict[str, Any] = {"engine_s": 0.0, **({"close_s": 9.0, "close_begin_s": 8.9} if closed else {})}
    if open_step is not None:
        ledger["open_step"] = open_step
    meta = run / "steps-rank0.json"
    meta.write_text(json.dumps({"wall_s": 10.0, "ledger": ledger}))
    os.utime(meta, (mtime, mtime))
    return path


def test_the_run_before_says_which_steps_were_done_again(tmp_path: Path) -> None:
    write(tmp_path / "a", list(range(10)), 0.5, mtime=1000.0)
    now = write(tmp_path / "b", list(range(8, 14)), 0.5, mtime=1100.0)  # started at 1090, after a's last write
    resumed = find_resumed(read_record(now))
    assert resumed is not None and (resumed.at_step, resumed.reached, resumed.steps) == (8, 9, 2)
    assert resumed.seconds == 1.0 and resumed.closed and resumed.run == "a"
    assert resumed.text() == "resumed at step 8: 2 steps (1 s) redone since the checkpoint (run a reached step 9)"


def test_a_run_killed_before_it_closed_gives_a_lower_bound_and_its_open_step_counts(tmp_path: Path) -> None:
    write(tmp_path / "a", list(range(10)), 0.5, closed=False, mtime=1000.0)
    resumed = find_resumed(read_record(write(tmp_path / "b", [8, 9], 0.5, mtime=1100.0)))
    assert resumed is not None and resumed.steps == 2 and not resumed.closed and "at least 2 steps" in resumed.text()
    opened = {"step": 10, "ended": True, "elapsed_s": 0.25, "begin_s": 0.0, "wait_s": 0.0, "aside_s": 0.0}
    write(tmp_path / "c", list(range(10)), 0.5, mtime=1200.0, open_step=opened)  # completed step 10, then closed
    resumed = find_resumed(read_record(write(tmp_path / "d", [8, 9], 0.5, mtime=1300.0)))
    assert resumed is not None and (resumed.run, resumed.reached, resumed.steps, resumed.seconds) == ("c", 10, 3, 1.25)


def test_nothing_is_said_of_a_fresh_run_or_without_the_run_that_wrote_the_checkpoint(tmp_path: Path) -> None:
    write(tmp_path / "a", list(range(20, 30)), 0.5, mtime=1000.0)  # began past step 8: another run in the folder
    write(tmp_path / "b", [0, 1, 2], 0.5, mtime=1100.0)  # never reached step 8
    assert find_resumed(read_record(write(tmp_path / "c", [0, 1, 2], 0.5, mtime=1200.0))) is None  # from step 0
    assert find_resumed(read_record(write(tmp_path / "d", [8, 9], 0.5, mtime=1300.0))) is None


def test_the_run_that_wrote_the_checkpoint_is_found_past_other_runs_and_never_one_written_later(
        tmp_path: Path) -> None:
    write(tmp_path / "a", list(range(10)), 0.5, mtime=1000.0)
    write(tmp_path / "b", [0, 1, 2], 0.5, mtime=1100.0)  # a fresh run since, that never reached step 8
    write(tmp_path / "c", list(range(12)), 0.5, mtime=1200.0)  # still written after e began (a job beside it)
    resumed = find_resumed(read_record(write(tmp_path / "e", [8, 9], 0.5, mtime=1205.0)))  # began at 1195
    assert resumed is not None and resumed.run == "a" and resumed.steps == 2


def test_a_run_resumed_at_a_step_the_run_before_never_passed_redid_nothing(tmp_path: Path) -> None:
    write(tmp_path / "a", list(range(8)), 0.5, mtime=1000.0)
    resumed = find_resumed(read_record(write(tmp_path / "b", [8, 9], 0.5, mtime=1100.0)))
    assert resumed is not None and resumed.steps == 0 and resumed.seconds == 0.0
    assert resumed.text() == "resumed at step 8: no step redone (run a reached step 7)"

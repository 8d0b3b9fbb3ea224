"""Real gloo ranks, one of which stops in its data loading before an all_reduce: every rank leaves its hang folder,
the report says who waits where, and the run ends as it would without the watchdog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perf_callbacks.cli import main
from tests.core.hang.hang_ranks import STUCK_RANK, STUCK_STEP, report_json, run_ranks

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
HANG_TIMEOUT = 1.5
SLACK_S = 3.0  # a poll (0.15 s) and a loaded machine's scheduling: "within hang_timeout plus a few seconds"


def test_every_rank_writes_its_folder_and_the_report_names_the_stuck_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = run_ranks(tmp_path, hang_timeout=HANG_TIMEOUT, stuck_s=6.0, pg_s=3.0)
    assert [o["error"] for o in outcomes] == ["RuntimeError", "RuntimeError"]  # the process group's timeout, as ever
    for rank, outcome in enumerate(outcomes):
        data = json.loads((tmp_path / "run" / f"hang-rank{rank}" / "hang.json").read_text())
        assert data["time"] - outcome["last_step_time"] <= HANG_TIMEOUT + SLACK_S
        assert data["step"] == STUCK_STEP and data["resumed"] is None
        assert data["phase"] == ("data_wait" if rank == STUCK_RANK else "forward")
    hang = report_json(tmp_path, capsys)["hang"]
    waiting = hang["ranks"][0]["collective"]
    assert waiting == {"op": "all_reduce", "seq": STUCK_STEP + 1, "group": "default", "bytes": 4096 * 4,
                       "source": "flight recorder"}  # fmt: skip
    assert hang["ranks"][STUCK_RANK]["collective"] is None
    assert hang["ranks"][STUCK_RANK]["last_seq"] == {"default": STUCK_STEP}
    assert hang["summary"][0].startswith(
        f"rank 0 waits in all_reduce #{STUCK_STEP + 1} (process group default, 16.4 kB); rank 1 never entered it "
        f"(its last there: #{STUCK_STEP}): its stack is in `hang_ranks.py:"
    )
    assert hang["summary"][0].endswith(" load_batch`")
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 0
    assert "rank 1 never entered it" in capsys.readouterr().out


def test_a_stall_that_ends_just_before_the_run_does_is_no_hang_on_any_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = run_ranks(tmp_path, hang_timeout=HANG_TIMEOUT, stuck_s=HANG_TIMEOUT + 1.0, pg_s=30.0)
    assert [o["error"] for o in outcomes] == [None, None]  # the last steps and the close take milliseconds: no poll
    hang = report_json(tmp_path, capsys)["hang"]
    assert [(r["rank"], r["step"], r["resumed"] is not None) for r in hang["ranks"]] == [(0, STUCK_STEP, True),
                                                                                          (1, STUCK_STEP, True)]
    assert all(line.endswith("a stall, not a hang") for line in hang["summary"]), hang["summary"]


def test_without_the_watchdog_the_run_ends_the_same(tmp_path: Path) -> None:
    outcomes = run_ranks(tmp_path, hang_timeout=0, stuck_s=6.0, pg_s=3.0)
    assert [o["error"] for o in outcomes] == ["RuntimeError", "RuntimeError"]
    assert not list(tmp_path.rglob("hang-rank*"))


def test_slow_steps_that_keep_completing_leave_no_folder(tmp_path: Path) -> None:
    outcomes = run_ranks(tmp_path, hang_timeout=HANG_TIMEOUT, step_s=HANG_TIMEOUT / 4)
    assert [o["error"] for o in outcomes] == [None, None]
    assert not list(tmp_path.rglob("hang-rank*"))


def test_without_a_flight_recorder_the_report_finds_the_collective_on_the_stacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "0")  # read by each rank's process group at its creation
    run_ranks(tmp_path, hang_timeout=HANG_TIMEOUT, stuck_s=6.0, pg_s=3.0)
    assert not list(tmp_path.rglob("flight_recorder*.json"))
    hang = report_json(tmp_path, capsys)["hang"]
    assert hang["ranks"][0]["collective"] == {"op": "all_reduce", "seq": None, "group": None, "bytes": None,
                                              "source": "stack"}  # fmt: skip
    assert hang["summary"][0].startswith("rank 0 waits in all_reduce; rank 1 is in no collective: its stack is in ")
    assert hang["summary"][0].endswith(" load_batch`")

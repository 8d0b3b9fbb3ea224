"""Reading hang folders: who waits in which collective, who never entered it, from the Flight Recorder or the stacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perf_callbacks.analysis.windows.hang import read_hangs
from perf_callbacks.cli import main

LIB = "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py"
TRAIN = "/home/me/train.py"


def frames(*user: tuple[int, str], collective: str | None = None) -> list[dict]:
    out = [{"file": "/usr/lib/python3.11/runpy.py", "line": 1, "function": "_run_code", "library": True}]
    out += [{"file": TRAIN, "line": line, "function": fn, "library": False} for line, fn in user]
    if collective:
        out += [{"file": LIB, "line": 3252, "function": collective, "library": True}]
    return out


def entry(seq: int, retired: bool, op: str = "all_reduce", numel: int = 16 * 2**20) -> dict:
    return {"collective_seq_id": seq, "p2p_seq_id": 0, "is_p2p": False, "record_id": seq - 1, "retired": retired,
            "state": "scheduled", "profiling_name": f"nccl:{op}", "process_group": ["0", "default_pg"],
            "input_sizes": [[numel]], "input_dtypes": ["Float"]}  # fmt: skip


def write_rank(run: Path, rank: int, user: list[tuple[int, str]], collective: str | None = None,
               recorded: list[dict] | None = None, world: int = 4, **more: object) -> None:  # fmt: skip
    folder = run / f"hang-rank{rank}"
    folder.mkdir(parents=True)
    files = []
    if recorded is not None:
        (folder / "flight_recorder_nccl.json").write_text(json.dumps({"version": "2.10", "entries": recorded}))
        files = ["flight_recorder_nccl.json"]
    threads = [{"id": 2, "name": "pin", "training": False, "frames": frames((7, "other_thread"))},
               {"id": 1, "name": "MainThread", "training": True, "frames": frames(*user, collective=collective)}]  # fmt: skip
    data = {"format": "perf-callbacks-hang/1", "rank": rank, "step": 1203, "phase": "backward", "waited_s": 312.0,
            "timeout_s": 300.0, "aside": None, "threads": threads, "flight_recorder": files, "resumed": None,
            "world_size": world, **more}  # fmt: skip
    (folder / "hang.json").write_text(json.dumps(data))
    (folder / "stacks.txt").write_text("Thread 0x1 (most recent call first):\n")


def test_the_flight_recorder_names_the_collective_and_the_rank_that_never_entered_it(tmp_path: Path) -> None:
    done = [entry(s, True) for s in range(1195, 1204)]
    for rank in range(3):
        write_rank(tmp_path, rank, [(60, "train"), (75, "step")], "all_reduce", [*done, entry(1204, False)])
    write_rank(tmp_path, 3, [(60, "train"), (88, "load_batch")], None, done)
    hang = read_hangs(tmp_path)
    assert hang is not None
    assert hang["summary"] == ["ranks 0-2 wait in all_reduce #1,204 (process group default, 67.1 MB); rank 3 never "
                               "entered it (its last there: #1,203): its stack is in `train.py:88 load_batch`"]  # fmt: skip
    assert hang["missing"] == []
    assert [r["where"] for r in hang["ranks"]] == ["train.py:75 step"] * 3 + ["train.py:88 load_batch"]


def test_with_two_collectives_pending_the_rank_waits_in_the_older_one(tmp_path: Path) -> None:
    """Async collectives: a rank can have enqueued one more before the first completes; it waits in the oldest."""
    done = [entry(s, True) for s in range(1195, 1204)]
    pending = [entry(1204, False), entry(1205, False, op="all_gather", numel=2**20)]
    for rank in range(3):
        write_rank(tmp_path, rank, [(60, "train"), (75, "step")], "all_reduce", [*done, *pending])
    write_rank(tmp_path, 3, [(60, "train"), (88, "load_batch")], None, done)
    hang = read_hangs(tmp_path)
    assert hang is not None
    assert [r["collective"]["op"] for r in hang["ranks"][:3]] == ["all_reduce"] * 3
    assert [r["collective"]["seq"] for r in hang["ranks"][:3]] == [1204] * 3
    assert hang["summary"][0].startswith("ranks 0-2 wait in all_reduce #1,204 (process group default, 67.1 MB)")


def test_without_a_flight_recorder_the_collective_comes_from_the_stacks(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, [(75, "step")], "all_reduce", world=3)
    write_rank(tmp_path, 2, [(75, "step")], "all_reduce", world=3)
    write_rank(tmp_path, 1, [(88, "load_batch")], None, world=3)
    hang = read_hangs(tmp_path)
    assert hang is not None
    assert hang["ranks"][0]["collective"] == {"op": "all_reduce", "seq": None, "group": None, "bytes": None,
                                              "source": "stack"}  # fmt: skip
    assert hang["summary"] == ["ranks 0, 2 wait in all_reduce; rank 1 is in no collective: its stack is in "
                               "`train.py:88 load_batch`"]  # fmt: skip


def test_ranks_without_a_folder_and_ranks_that_resumed_are_said(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, [(75, "step")], "barrier", world=4)
    write_rank(tmp_path, 1, [(75, "step")], "barrier", world=4, resumed={"steps_run": 1300, "after_s": 41.0})
    hang = read_hangs(tmp_path)
    assert hang is not None
    assert hang["summary"] == [
        "rank 0 waits in barrier",
        "rank 1 resumed 41 s after it wrote: a stall, not a hang",
        "no hang folder from ranks 2-3 (it kept completing steps, or wrote elsewhere)",
    ]


def test_no_hang_folder_no_hang(tmp_path: Path) -> None:
    (tmp_path / "window-000010-000012").mkdir()
    assert read_hangs(tmp_path) is None
    assert read_hangs(tmp_path / "missing") is None


@pytest.mark.parametrize("as_json", [True, False])
def test_report_on_a_run_with_hang_folders_and_no_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        as_json: bool) -> None:  # fmt: skip
    write_rank(tmp_path / "run", 0, [(75, "step")], "all_reduce", world=2)
    write_rank(tmp_path / "run", 1, [(88, "load_batch")], None, world=2)
    assert main(["report", str(tmp_path), *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    if as_json:
        assert json.loads(out)["hang"]["summary"][0].startswith("rank 0 waits in all_reduce; rank 1 is in no")
    else:
        assert "rank 0 waits in all_reduce; rank 1 is in no collective: its stack is in `train.py:88 load_batch`" in out


def test_report_with_traces_and_hang_folders_has_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    window = tmp_path / "run" / "window-000001-000002"
    window.mkdir(parents=True)
    trace = Path(__file__).parents[2] / "data" / "gpu_traces" / "compute_bound.pt.trace.json.gz"
    (window / trace.name).write_bytes(trace.read_bytes())
    write_rank(tmp_path / "run", 0, [(75, "step")], "all_reduce", world=1)
    assert main(["report", str(tmp_path), "--json"]) in (0, 1)
    data = json.loads(capsys.readouterr().out)
    assert data["hang"]["summary"] == ["rank 0 waits in all_reduce"]
    assert not any("hang.json" in n for n in data["notes"])  # the hang folder's JSON files are no traces
    assert main(["report", str(tmp_path)]) in (0, 1)
    assert "hang (no step completed; from the hang-rank folders):\n  rank 0 waits in all_reduce" in \
        capsys.readouterr().out  # fmt: skip
    page = tmp_path / "report.html"
    assert main(["report", str(tmp_path), "--html", str(page)]) in (0, 1)
    assert "<li>rank 0 waits in all_reduce</li>" in page.read_text()

"""A 2-process gloo DDP fit: the report shows both ranks' ledgers; rank 0 alone prints the ledger's line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perf_callbacks.cli import EXIT_OK, main
from tests.integrations.ddp_helpers import launch

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def test_the_report_of_a_two_rank_run_shows_each_ranks_ledger(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    proc = launch(tmp_path, "--in-memory")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sum("goodput" in line and line.startswith("perf-callbacks: ") for line in proc.stderr.splitlines()) == 1
    assert main(["report", str(tmp_path / "perf"), "--json"]) == EXIT_OK
    ledger = json.loads(capsys.readouterr().out)["ledger"]
    ranks = ledger["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["steps"] == 10 for r in ranks)
    for r in ranks:
        assert abs(r["parts"]["unaccounted"]) <= 0.01 * (r["wall_s"] - r["parts"]["startup_before"]), r
    assert ledger["wall_s"] == max(r["wall_s"] for r in ranks)
    assert main(["report", str(tmp_path / "perf")]) == EXIT_OK
    out = capsys.readouterr().out
    lines = out[out.index("\nledger: "):].splitlines()
    [rank0] = [x for x in lines if x.startswith("  rank 0: ")]
    [rank1] = [x for x in lines if x.startswith("  rank 1: ")]
    assert "goodput" in rank0 and "goodput" in rank1
    assert sum(line.endswith("(slowest)") for line in (rank0, rank1)) == 1

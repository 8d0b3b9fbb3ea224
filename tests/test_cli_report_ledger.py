"""``perf-callbacks report`` shows the ledger of a real Lightning run: a ``ledger`` object in ``--json`` and a line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perf_callbacks.analysis.ledger.parts import PARTS
from perf_callbacks.analysis.ledger.text import run_ledgers, summary_line
from perf_callbacks.cli import EXIT_OK, main
from tests.integrations.ledger_helpers import planted_fit


def test_report_shows_the_ledger_in_json_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planted = planted_fit(tmp_path, steps=8, ckpt_s=0.1, window=True)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "perf"), "--json"]) == EXIT_OK
    ledger = json.loads(capsys.readouterr().out)["ledger"]
    assert set(ledger["parts"]) == set(PARTS) and ledger["rank"] == 0 and ledger["steps"] == 8
    assert abs(sum(ledger["parts"].values()) - ledger["wall_s"]) < 1e-3
    assert ledger["goodput"] == pytest.approx(ledger["parts"]["productive"] / ledger["wall_s"], abs=1e-3)
    assert planted.checkpoint_s <= ledger["parts"]["checkpoint"] <= planted.saves_s + 1e-3  # the test's clock
    assert ledger["parts"]["own"] > 0  # the window's export and the close are ours
    assert [r["rank"] for r in ledger["ranks"]] == [0]
    [advice] = [a for a in ledger["advice"] if a["part"] == "checkpoint"]
    assert advice["every"] > 1 and advice["saving_s"] > 0
    assert main(["report", str(tmp_path / "perf")]) == EXIT_OK
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("ledger: ")]
    [led] = run_ledgers(tmp_path / "perf")  # unrounded
    assert line == f"ledger: {summary_line(led)}" and f"goodput {led.goodput:.0%}" in line  # parts over 1% of wall
    page = tmp_path / "page.html"
    assert main(["report", str(tmp_path / "perf"), "--html", str(page)]) == EXIT_OK
    html = page.read_text()
    assert html.count('<section class="ledger"') == 1 and html.index('class="ledger"') < html.index("</body>")
    share = led.parts["checkpoint"] / led.wall_s
    assert f'title="checkpoints {led.parts["checkpoint"]:.2f} s ({share:.0%})"' in html


def test_diff_after_the_advice_shows_the_checkpoint_part_shrinking_by_its_saving(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint every step, then every N steps as the advice says: the checkpoint part falls by the saving."""
    from perf_callbacks.analysis.ledger.advice import ledger_advice
    from perf_callbacks.analysis.ledger.compare import format_ledger_diff

    planted_fit(tmp_path / "a", steps=30, ckpt_s=0.05)
    [before] = run_ledgers(tmp_path / "a" / "perf")
    [advice] = [a for a in ledger_advice(before) if a.part == "checkpoint"]
    assert advice.every is not None
    every = min(advice.every, 10)  # a short run: at most every 10 steps (3 saves), the saving as the advice reckons
    planted_fit(tmp_path / "b", steps=30, ckpt_s=0.05, ckpt_every=every)
    capsys.readouterr()
    main(["diff", str(tmp_path / "a" / "perf"), str(tmp_path / "b" / "perf"), "--json"])
    ledger = json.loads(capsys.readouterr().out)["ledger"]
    saving = before.parts["checkpoint"] * (1 - 1 / every)
    assert ledger["base"]["parts"]["checkpoint"] == pytest.approx(before.parts["checkpoint"], abs=1e-3)
    assert close_to(-ledger["change"]["checkpoint"], saving), (ledger["change"], saving)
    main(["diff", str(tmp_path / "a" / "perf"), str(tmp_path / "b" / "perf")])
    assert capsys.readouterr().out.endswith(format_ledger_diff(ledger))  # the table after the whole-run call
    row = f"  {'checkpoints':<22}{ledger['base']['parts']['checkpoint']:>9.2f} s"
    assert row in format_ledger_diff(ledger, shown=0.0)


def close_to(found: float, planted: float) -> bool:
    return abs(found - planted) <= max(0.05 * planted, 0.05)


def test_the_ledger_is_the_reported_runs_own_never_one_found_above_it(tmp_path: Path) -> None:
    """A window folder copied without its run's record, under a folder that holds another run: no ledger is lent."""
    import shutil

    planted_fit(tmp_path / "other", steps=8, ckpt_s=0.0, window=True)
    [window] = list((tmp_path / "other" / "perf").glob("*/window-*"))
    assert run_ledgers(window) and run_ledgers(window / "rank0.pt.trace.json.gz")  # its own run's, beside it
    lone = tmp_path / "copies" / window.name  # two levels up from it: tmp_path, which holds the other run
    shutil.copytree(window, lone)
    assert run_ledgers(lone) == run_ledgers(lone.parent) == run_ledgers(lone / "rank0.pt.trace.json.gz") == []
    assert run_ledgers(tmp_path / "other" / "perf")  # an output dir: its newest run below it

"""The hang dump's files on a bad disk: whole or absent, a line that claims only what was written, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perf_callbacks.core.hang.watchdog import HangWatch
from tests.core.hang.test_hang import Fed
from tests.small_fs import fill, roomy_fs, small_fs  # noqa: F401 - the fixtures

ROOT = Path(__file__).resolve().parents[3]


def test_a_full_disk_leaves_no_partial_file_and_the_line_claims_nothing_unwritten(
    small_fs: Path, capfd: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    run = small_fs / "run"
    (run / "hang-rank0").mkdir(parents=True)
    fill(small_fs)
    watch = HangWatch(Fed(), run, rank=0, timeout=1.0)
    watch.check(0.0)
    assert watch.check(2.0) == run / "hang-rank0"  # it tried, and goes on
    left = sorted(p.name for p in (run / "hang-rank0").iterdir())
    assert not [name for name in left if name.endswith(".partial")], left
    for name in left:  # whatever is there is whole
        assert (run / "hang-rank0" / name).stat().st_size > 0, left
    if "hang.json" in left:
        json.loads((run / "hang-rank0" / "hang.json").read_text())
    err = capfd.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("perf-callbacks: rank 0: no step completed")]
    assert "are in" not in line and "stacks.txt could not be written (OSError: No space left on device)" in line
    assert "Traceback" not in err


def test_a_full_disk_after_the_dump_leaves_the_resumed_mark_whole_or_as_it_was(
    roomy_fs: Path,  # noqa: F811
) -> None:
    run = roomy_fs / "run"
    watch = HangWatch(Fed(), run, rank=0, timeout=1.0)
    fed = watch.probe
    watch.check(0.0)
    folder = watch.check(2.0)
    assert folder is not None and (folder / "hang.json").exists()
    before = (folder / "hang.json").read_text()
    fill(roomy_fs)
    fed.step()  # type: ignore[attr-defined]
    watch.check(3.0)  # steps resumed: hang.json gets `resumed`, which the full disk refuses
    assert (folder / "hang.json").read_text() == before
    assert not list(folder.glob(".*.partial"))


def test_an_unwritable_run_folder_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    """In a child process with Python's default logging (no handler): what the user's terminal would show."""
    blocker = tmp_path / "run"
    blocker.write_text("a file where the run folder should be")
    code = textwrap.dedent(f"""
        from pathlib import Path
        from perf_callbacks.core.hang.watchdog import HangWatch
        from tests.core.hang.test_hang import Fed
        watch = HangWatch(Fed(), Path({str(blocker)!r}), rank=0, timeout=1.0)
        watch.check(0.0)
        assert watch.check(2.0) is not None
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [x for x in done.stderr.splitlines() if "perf-callbacks" in x]
    assert len(lines) == 1 and "no evidence was written" in lines[0] and "could not be created" in lines[0], lines

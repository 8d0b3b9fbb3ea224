"""Our warnings as Python prints them: one line that starts with ``perf-callbacks:``; other warnings as before."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from perf_callbacks.core.warn import WarnOnce, warn_user
from perf_callbacks.exceptions import DataLoaderWarning, PerfWarning

ROOT = Path(__file__).resolve().parents[2]


def test_printed_warnings_are_one_perf_callbacks_line_and_others_are_untouched(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import warnings
        from perf_callbacks.core.warn import WarnOnce, warn_user
        from perf_callbacks.exceptions import DataLoaderWarning, InstrumentUnavailableWarning

        warn_user("NVML is not available", InstrumentUnavailableWarning)
        WarnOnce(is_main=True)("data_wait", DataLoaderWarning, "data loading took 41% of step time; try num_workers=4")
        warnings.warn("someone else's", UserWarning)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"perf-callbacks: NVML is not available (InstrumentUnavailableWarning, {script}:5)",
        f"perf-callbacks: data loading took 41% of step time; try num_workers=4 (DataLoaderWarning, {script}:6)",
        f"{script}:7: UserWarning: someone else's",  # Python's own format, its source line below
        """  warnings.warn("someone else's", UserWarning)""",
    ]


def test_filters_and_pytest_warns_see_the_same_category_and_message() -> None:
    before = warnings.formatwarning
    with pytest.warns(DataLoaderWarning, match=r"^perf-callbacks: data wait 31%$") as seen:
        warn_user("data wait 31%", DataLoaderWarning)
    assert seen[0].filename == __file__  # attributed to the caller, as before
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerfWarning)  # -W error::perf_callbacks.exceptions.PerfWarning
        with pytest.raises(DataLoaderWarning, match=r"^perf-callbacks: data wait 31%$"):
            WarnOnce(is_main=True)("k", DataLoaderWarning, "data wait 31%")
    assert warnings.formatwarning is before  # ours only while our warning was on its way

"""Derived attributes: read from the object's parts at each read, refused on a write, documented on the class."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.views import Derived


def test_the_engines_views_follow_its_parts_and_refuse_writes(tmp_path: Path) -> None:
    engine = PerfEngine(PerfConfig.from_dict({"summary": False}), RunContext(output_dir=tmp_path, run_name="run"))
    assert (engine.step, engine.steps_run) == (None, 0)
    engine.batch_start(0)
    engine.batch_end(stepped=True)
    assert (engine.step, engine.steps_run) == (0, 1)  # the step state's, read now, not at construction
    with pytest.raises(AttributeError, match="PerfEngine.steps_run is read-only"):
        engine.steps_run = 5
    assert engine.steps_run == 1
    assert isinstance(PerfEngine.step, Derived) and PerfEngine.step.__doc__ == "The open step (None before the first)."
    engine.close()

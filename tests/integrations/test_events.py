"""Our own TensorBoard event file (``integrations/_events.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

WRITERS = ("torch.utils.tensorboard.summary", "tensorboard.compat.proto.event_pb2",
           "tensorboard.summary.writer.record_writer")


def test_what_a_write_needs_is_imported_at_setup_not_in_the_first_logging_step(tmp_path: Path) -> None:
    """In a fresh interpreter: after ``EventFile(...)`` the first write imports nothing (the other ranks would wait)."""
    code = f"""
import sys
from pathlib import Path
from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.integrations._events import EventFile
events = EventFile(Path({str(tmp_path)!r}), Outputs())
before = set(sys.modules)
events.scalars({{"perf/train/step_time_ms": 1.0}}, 1)
print(sorted(m for m in set(sys.modules) - before if m.startswith(("tensorboard", "torch.utils.tensorboard"))))
print(all(m in before for m in {WRITERS!r}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "True"], out
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1


def test_without_tensorboard_events_are_off_with_one_warning(tmp_path: Path) -> None:
    code = f"""
import sys, warnings
sys.modules["tensorboard"] = None  # import tensorboard raises ImportError
from pathlib import Path
from perf_callbacks.core.files.outputs import Outputs
from perf_callbacks.integrations._events import EventFile
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    events = EventFile(Path({str(tmp_path)!r}), Outputs())
    events.scalars({{"perf/train/step_time_ms": 1.0}}, 1)
    events.text("perf/summary", "x", 1)
print(len(seen), "tensorboard" in str(seen[0].message))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "True"], out
    assert not list(tmp_path.iterdir())

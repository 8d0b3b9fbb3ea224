"""Trace files: a full disk below ``compress_trace`` leaves no half-written file, and training goes on."""

from __future__ import annotations

import errno
import gzip
import json
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine import PerfEngine, RunContext
from perf_callbacks.core.traces import compress_trace
from perf_callbacks.exceptions import InstrumentUnavailableWarning


def _disk_full(self: gzip.GzipFile, data: Any) -> NoReturn:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every gzip write fails as on a full disk (the raw export before it still succeeds)."""
    monkeypatch.setattr(gzip.GzipFile, "write", _disk_full)


def test_compress_trace_on_a_full_disk_leaves_nothing_behind(tmp_path: Path, full_disk: None) -> None:
    raw = tmp_path / ".rank0.raw.partial"
    raw.write_text(json.dumps({"traceEvents": []}))
    dest = tmp_path / "rank0.pt.trace.json.gz"
    with pytest.raises(OSError, match="No space left") as info:
        compress_trace(raw, dest)
    assert info.value.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_path.iterdir()) == [raw.name]  # the caller owns (and deletes) the raw file


def test_export_failure_disables_profiler_and_training_goes_on(tmp_path: Path, full_disk: None) -> None:
    logged: list[int] = []
    config = PerfConfig.from_dict({"schedule": {"skip_first": 2, "wait": 0, "warmup": 1, "active": 1, "repeat": 0},
                                   "summary": False, "degradation_threshold": 1e6})
    engine = PerfEngine(config, RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=5,
                                           log_metrics=lambda metrics, step: logged.append(step)))
    x = torch.randn(8, 8, requires_grad=True)
    with pytest.warns(InstrumentUnavailableWarning, match=r"profiler disabled: OSError.*No space left") as seen:
        for step in range(20):  # windows at steps 3, 5, 7, ...: the first export fails, the profiler stays off
            engine.batch_start(step)
            (x @ x).sum().backward()
            engine.batch_end(stepped=True, samples=8)
        engine.close()
    assert len([w for w in seen if issubclass(w.category, InstrumentUnavailableWarning)]) == 1
    assert logged == [5, 10, 15, 20]  # metrics go on after the failure
    assert not torch.autograd.profiler._is_profiler_enabled
    leftovers = [p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()]
    assert leftovers == [], "no trace, no .partial, no raw export"

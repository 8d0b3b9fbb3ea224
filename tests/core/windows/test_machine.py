"""Each window's trace says what the report's advice needs of the machine: CPU cores, ranks on it, the loader's
num_workers, CUDA; the report then fits its advice to the machine that ran the training, not to the one reading it."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

from perf_callbacks.analysis import analyze
from perf_callbacks.analysis.judge.advice import available_cpus
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.windows.machine import cpu_bf16


def _window(tmp_path: Path, workers: int | None, local: int | None, wait_s: float = 0.0) -> Path:
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 1, "wait": 0, "warmup": 1, "active": 3}, "summary": False})
    ctx = RunContext(output_dir=tmp_path, run_name="run", data_loader=("train_dataloader", workers),
                     local_world_size=local)
    engine = PerfEngine(cfg, ctx)
    for step in range(6):
        engine.data_start()
        time.sleep(wait_s)
        engine.data_end()
        engine.batch_start(step)
        engine.batch_end(stepped=True, samples=8)
    engine.close()
    (trace,) = engine.exported
    return trace


def test_the_trace_carries_the_machine(tmp_path: Path) -> None:
    trace = _window(tmp_path, workers=3, local=2)
    meta = json.load(gzip.open(trace))["perf_callbacks_machine"]
    assert meta == {"cpu_cores": available_cpus(), "local_world_size": 2, "loader": "train_dataloader",
                    "num_workers": 3, "cuda": False, "cpu_bf16": cpu_bf16()}
    (rank,) = analyze(trace).ranks
    assert rank.machine == meta and rank.cuda_on_host is False


def test_no_more_workers_when_the_loader_already_uses_every_core(tmp_path: Path) -> None:
    """A loader with as many workers as the rank has cores keeps the step waiting 20 ms: the advice is what helps
    then (the cost of each batch), never "raise num_workers"."""
    cores = available_cpus()
    result = analyze(_window(tmp_path, workers=cores, local=1, wait_s=0.02))
    assert result.verdict == "input_bound"
    advice = result.recommendations[0]
    assert f"num_workers={cores} already uses the {cores} CPU cores per local rank, so more workers cannot help" in \
        advice, advice
    assert "raise num_workers" not in advice and "try num_workers" not in advice
    assert "activities=[CPU, CUDA]" not in "".join(result.recommendations)  # trained on CPU: no CUDA advice

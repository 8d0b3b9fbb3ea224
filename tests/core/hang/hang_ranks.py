"""Real gloo ranks driving the engine by hand, one of which stops before a collective: the hang tests' input.

Each rank runs ``STEPS`` steps of ``data_start -> load_batch -> data_end -> batch_start -> all_reduce -> batch_end``;
at step ``STUCK_STEP`` rank ``STUCK_RANK`` sleeps ``stuck_s`` in ``load_batch`` (a data loader that stops), so the
others wait in that step's all_reduce until the process group's timeout ends them. Each rank writes
``outcome-rank{R}.json``: the exception that ended its loop (type name, None for a clean run) and when its last step
completed (wall clock).
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from perf_callbacks.cli import main
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.engine.engine import PerfEngine
from tests.analysis.gloo_traces import free_port

STUCK_RANK = 1
STUCK_STEP = 4
STEPS = 8
TENSOR = 4096  # floats: 16 kB


def load_batch(rank: int, step: int, stuck_s: float) -> torch.Tensor:
    if rank == STUCK_RANK and step == STUCK_STEP:
        time.sleep(stuck_s)  # the stuck rank's stack line
    return torch.ones(TENSOR)


def _worker(
    rank: int, world: int, port: int, out: str, hang_timeout: float, stuck_s: float, pg_s: float, step_s: float
) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=pg_s)
    )
    cfg = PerfConfig(
        hang_timeout=hang_timeout, summary=False, memory=False, flops=False, nvtx=False, schedule={"skip_first": 1000}
    )
    engine = PerfEngine(
        cfg, RunContext(output_dir=Path(out), run_name="run", rank=rank, world_size=world, distributed_initialized=True)
    )
    error, last = None, time.time()
    try:
        for step in range(STEPS):
            engine.data_start()
            batch = load_batch(rank, step, stuck_s)
            engine.data_end()
            engine.batch_start(step)
            time.sleep(step_s)
            dist.all_reduce(batch)
            engine.batch_end(stepped=True)
            last = time.time()
        engine.close()
    except Exception as exc:  # noqa: BLE001 - the outcome is what the test compares
        error = type(exc).__name__
        engine.close(exc)
    Path(out, f"outcome-rank{rank}.json").write_text(json.dumps({"error": error, "last_step_time": last}))
    dist.destroy_process_group()  # also after a timeout: else gloo's teardown at exit may abort (either way)


def run_ranks(
    out: Path, hang_timeout: float, stuck_s: float = 0.0, world: int = 2, pg_s: float = 3.0, step_s: float = 0.0
) -> list[dict]:
    """Run ``world`` ranks into ``out``; returns each rank's outcome (see the module's docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(world, free_port(), str(out), hang_timeout, stuck_s, pg_s, step_s), nprocs=world, join=True)
    return [json.loads((out / f"outcome-rank{r}.json").read_text()) for r in range(world)]


def report_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    """What ``perf-callbacks report PATH --json`` says."""
    capsys.readouterr()
    assert main(["report", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)

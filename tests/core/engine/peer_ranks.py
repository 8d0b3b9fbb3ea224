"""Real gloo ranks driving the engine by hand, one all-reduce a step, one rank slow in data loading: the input of the
between-windows comparison's tests (``core/engine/peers.py``).

Each rank runs ``STEPS`` steps of ``data_start -> (sleep) -> data_end -> batch_start -> sleep -> all_reduce ->
batch_end``, logging every ``EVERY`` steps. With ``slow_data_s`` > 0, rank 1 sleeps that long in each fetch (the
others wait for it in the all-reduce). Each rank writes ``outcome-rank{R}.json``: the PerfWarnings it gave
(``[category, message]``).
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.engine.engine import PerfEngine
from perf_callbacks.exceptions import PerfWarning
from tests.analysis.gloo_traces import free_port

STEPS = 70
EVERY = 5
STEP_S = 0.01


def _worker(rank: int, port: int, out: str, slow_data_s: float) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    cfg = PerfConfig(summary=False, memory=False, flops=False, nvtx=False, schedule={"skip_first": 1000},
                     capture_poll_s=0, capture_signal=None, check_dataloaders=False, degradation_threshold=1e6,
                     data_wait_steps=10_000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PerfWarning)
        engine = PerfEngine(cfg, RunContext(output_dir=Path(out), run_name="run", rank=rank, world_size=2,
                                            log_every_n_steps=EVERY, distributed_initialized=True))
        x = torch.ones(1024)
        for step in range(STEPS):
            engine.data_start()
            if rank == 1 and slow_data_s:
                time.sleep(slow_data_s)
            engine.data_end()
            engine.batch_start(step)
            time.sleep(STEP_S)
            dist.all_reduce(x)
            engine.batch_end(stepped=True, samples=8)
        engine.close()
    said = [[w.category.__name__, str(w.message)] for w in caught if issubclass(w.category, PerfWarning)]
    Path(out, f"outcome-rank{rank}.json").write_text(json.dumps(said))
    dist.barrier()
    dist.destroy_process_group()


def run_ranks(out: Path, slow_data_s: float) -> list[list[list[str]]]:
    """Run the two ranks into ``out``; each rank's warnings (see the module's docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(free_port(), str(out), slow_data_s), nprocs=2, join=True)
    return [json.loads((out / f"outcome-rank{r}.json").read_text()) for r in (0, 1)]

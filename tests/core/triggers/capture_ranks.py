"""Real gloo ranks driving the engine by hand, asked for one window on all ranks: the agreement tests' input.

Each rank runs ``STEPS`` steps with no collective between them (a rank's steps do not wait for the other's), rank 1
``SLOW`` times slower per step than rank 0, so that at any moment the two ranks are at very different steps. The
request comes from ``perf-callbacks capture`` run by rank 0 at its step ``ASK_AT`` (``how="cli"``), or from
``SIGUSR2`` that rank 1 sends itself at its step ``SIGNAL_AT`` with ``capture_signal_all_ranks`` (``how="signal"``).
``how="dead"``: rank 1 joins the process group and exits at once (before training); rank 0 asks alone. Each live
rank writes ``outcome-rank{R}.json``: the windows it recorded (folder names) and the last step it ran.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from perf_callbacks.cli import main
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.engine.engine import PerfEngine
from tests.analysis.gloo_traces import free_port

STEP_S = 0.01  # rank 0's step: its sleep
SLOW = 4  # rank 1's step sleeps this many times longer
STEPS = 90
ASK_AT = 40  # rank 0 runs `perf-callbacks capture` after this step (rank 1 is near step 10 then)
SIGNAL_AT = 10  # rank 1 signals itself after this step (rank 0 is near step 40 then)
POLL_S = 0.05


def _worker(rank: int, port: int, out: str, how: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    if how == "dead" and rank == 1:
        os._exit(0)  # gone without a word: rank 0 must not wait for it
    cfg = PerfConfig(summary=False, memory=False, flops=False, nvtx=False, schedule={"skip_first": 1000},
                     capture_poll_s=POLL_S, capture_signal_all_ranks=how == "signal", check_dataloaders=False)
    engine = PerfEngine(cfg, RunContext(output_dir=Path(out) / "perf", run_name="run", rank=rank, world_size=2,
                                        log_every_n_steps=10, distributed_initialized=True))
    x, step = torch.randn(16, 16), 0
    for step in range(STEPS):
        engine.data_start()
        engine.data_end()
        engine.batch_start(step)
        time.sleep(STEP_S * (SLOW if rank == 1 else 1))
        (x @ x).sum()
        engine.batch_end(stepped=True, samples=16)
        if rank == 0 and step == ASK_AT and how in ("cli", "dead"):
            assert main(["capture", str(Path(out) / "perf"), "--steps", "2"]) == 0
        if rank == 1 and step == SIGNAL_AT and how == "signal":
            os.kill(os.getpid(), signal.SIGUSR2)
    engine.close()
    windows = sorted(p.parent.name for p in Path(out, "perf", "run").glob(f"window-*/rank{rank}.pt.trace.json.gz"))
    Path(out, f"outcome-rank{rank}.json").write_text(json.dumps({"windows": windows, "last": step}))
    if how != "dead":
        dist.barrier()
    dist.destroy_process_group()


def run_ranks(out: Path, how: str) -> dict[int, dict]:
    """Run the two ranks into ``out``; each live rank's outcome by rank (see the module's docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(free_port(), str(out), how), nprocs=2, join=True)
    return {r: json.loads(p.read_text()) for r in (0, 1) if (p := out / f"outcome-rank{r}.json").is_file()}

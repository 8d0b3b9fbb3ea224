"""Two ranks of a ``transformers.Trainer`` run on CPU (gloo), forked from this script.

Usage: python -m tests.integrations.hf_two_ranks OUT_DIR
Each rank trains 8 optimizer steps with TransformersPerfCallback (windows 3-4 and 6-7, DataLoader checks on) and
writes OUT_DIR/rank{R}.json with its step count, world size and the PerfWarnings it saw.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import warnings
from pathlib import Path

import torch

from perf_callbacks import PerfWarning, TransformersPerfCallback
from tests.integrations.hf_helpers import QUIET, SCHEDULE, make_trainer


def _rank_main(rank: int, out: Path, port: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cb = TransformersPerfCallback(output_dir=str(out / "perf"), schedule={**SCHEDULE, "repeat": 2},
                                  **{**QUIET, "check_dataloaders": True, "data_wait_steps": 1})
    # a slow dataset: data wait is measured high on step 1 (step 0 is the check's warm-up; steps 2-7 are in windows);
    # 80 ms a batch, so that the share stays far above 10% however slow a loaded machine makes the step's own work
    trainer = make_trainer(out, [cb], max_steps=8, n=128, sleep_ms=20.0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", PerfWarning)
        trainer.train()
    result = {"steps": trainer.state.global_step, "world_size": trainer.args.world_size,
              "warnings": [f"{w.category.__name__}: {w.message}" for w in seen if issubclass(w.category, PerfWarning)]}
    (out / f"rank{rank}.json").write_text(json.dumps(result))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    torch.multiprocessing.start_processes(_rank_main, args=(Path(sys.argv[1]), _free_port()), nprocs=2,
                                          start_method="fork")

"""A 2-process DDP fit on CPU (gloo), run as a script: Lightning's ddp strategy re-launches this file per rank.

Usage: python -m tests.integrations.ddp_fit OUT_DIR [--no-distributed-sampler] [--fail-rank R [--oom] [--linger]]
    [--in-memory] [--module-spans]
With --in-memory, the loader is a fast in-process TensorDataset (num_workers=0). With --module-spans, module_spans on.
With --fail-rank R, rank R raises in training_step at step 4 (inside the window 3-4); ValueError, or with --oom
torch.OutOfMemoryError. With --linger as well, collectives time out after 5 s once training has started (the
rendezvous keeps a long timeout: on a loaded machine a rank can take longer than that to start), every rank catches
its error, and rank R stays alive until rank 0 has written its result: rank 0, still training, must get out through
the timeout. Each rank writes OUT_DIR/result-rank{R}.json with the warnings it saw, the traces it exported and its
error (a rank that failed before the callback was set up has exported nothing).
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DDPStrategy
from torch.distributed.distributed_c10d import _set_pg_timeout

from perf_callbacks import GPUPerfCallback, PerfWarning
from tests.integrations.lit_helpers import TinyModel, loader

RENDEZVOUS_TIMEOUT = timedelta(seconds=180)  # the other rank may take long to start (imports) on a loaded machine
COLLECTIVE_TIMEOUT = timedelta(seconds=5)


class CollectiveTimeout(Callback):
    """Once training starts (both ranks have met: DDP broadcast the weights), collectives time out after 5 s."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        _set_pg_timeout(COLLECTIVE_TIMEOUT)


def main() -> None:
    out = Path(sys.argv[1])
    use_sampler = "--no-distributed-sampler" not in sys.argv
    cb = GPUPerfCallback(output_dir=str(out / "perf"),
                         schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 2, "repeat": 2},
                         data_wait_steps=1000, module_spans="--module-spans" in sys.argv)
    linger = "--linger" in sys.argv
    strategy = DDPStrategy(timeout=RENDEZVOUS_TIMEOUT) if linger else "ddp"
    callbacks = [cb, CollectiveTimeout()] if linger else [cb]
    trainer = L.Trainer(strategy=strategy, accelerator="cpu", devices=2, max_steps=10, logger=False,
                        callbacks=callbacks, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, use_distributed_sampler=use_sampler)
    fail_rank = int(sys.argv[sys.argv.index("--fail-rank") + 1]) if "--fail-rank" in sys.argv else None
    failing = fail_rank == int(os.environ.get("LOCAL_RANK", "0"))
    model = TinyModel(fail_at_step=4 if failing else None)
    if failing and "--oom" in sys.argv:
        from tests.integrations.oom_helpers import OOMModel

        model = OOMModel("forward", at=4)
    error = None
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", PerfWarning)
        try:
            trainer.fit(model, loader(num_workers=0 if "--in-memory" in sys.argv else 1))
        except Exception as err:
            if not linger:
                raise
            error = f"{type(err).__name__}: {err}"
    perf = [f"{w.category.__name__}: {w.message}" for w in seen if issubclass(w.category, PerfWarning)]
    exported = cb.engine.exported if cb.engine is not None else []  # None: failed before the fit's setup
    result = {"rank": trainer.global_rank, "warnings": perf, "exported": [str(p) for p in exported], "error": error,
              "time": time.time()}
    (out / f"result-rank{trainer.global_rank}.json").write_text(json.dumps(result))
    deadline = time.time() + 60
    while linger and trainer.global_rank == fail_rank and not (out / "result-rank0.json").exists():
        if time.time() > deadline:
            break
        time.sleep(0.1)


if __name__ == "__main__":
    main()

"""No torch/kineto warning on the console is caused by us: the fd-level stderr of a Lightning fit and an Accelerate loop.

Kineto writes its warnings from C++ straight to file descriptor 2, around Python's ``sys.stderr``, so each run is a
subprocess whose whole stderr is read. Windows open and close several times, with validation and a checkpoint inside.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KINETO_NOISE = ("Profiler is not initialized", "disableProfiler called but no active profiling session")

LIGHTNING_FIT = textwrap.dedent("""
    import sys
    from lightning.pytorch.callbacks import ModelCheckpoint
    from perf_callbacks import GPUPerfCallback
    from tests.integrations.lit_helpers import TinyModel, loader, trainer
    out = sys.argv[1]
    cb = GPUPerfCallback(output_dir=out + "/perf", check_dataloaders=False, degradation_threshold=1e6,
                         schedule={"skip_first": 2, "wait": 1, "warmup": 1, "active": 2, "repeat": 2})
    ckpt = ModelCheckpoint(dirpath=out + "/ckpt", every_n_train_steps=4)
    trainer(out, [cb, ckpt], max_steps=14, val_check_interval=5, enable_checkpointing=True).fit(
        TinyModel(), loader(), loader(n=16))
    assert len(cb.engine.exported) == 2, cb.engine.exported
""")

ACCELERATE_LOOP = textwrap.dedent("""
    import sys, torch
    from torch import nn
    from accelerate import Accelerator
    from perf_callbacks import AcceleratePerfHook
    from tests.integrations.acc_helpers import data
    out = sys.argv[1]
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(128))
    with AcceleratePerfHook(output_dir=out + "/perf", check_dataloaders=False, degradation_threshold=1e6,
                            log_every_n_steps=2,
                            schedule={"skip_first": 2, "wait": 1, "warmup": 1, "active": 2, "repeat": 2}
                            ).register(acc) as hook:
        for x, y in hook.iter(dl):
            with acc.accumulate(model):
                acc.backward(nn.functional.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
            if hook.optimizer_steps % 5 == 0 and acc.sync_gradients:
                with hook.validation(), torch.no_grad():
                    model(x)
                acc.save_state(out + "/ckpt")
    assert len(hook.engine.exported) == 2, hook.engine.exported
""")

# A run that ends in a window's warm-up step, then a second run in the same process. Stopping a session that was only
# prepared printed "disableProfiler called but no active profiling session" (torch 2.13), and on torch 2.4 raised and
# left Kineto unusable: every later window in the process failed.
ENDS_IN_WARMUP = textwrap.dedent("""
    import sys
    from perf_callbacks import GPUPerfCallback
    from tests.integrations.lit_helpers import TinyModel, loader, trainer
    out = sys.argv[1]
    schedule = {"skip_first": 2, "wait": 1, "warmup": 1, "active": 2}
    first = GPUPerfCallback(output_dir=out + "/a", check_dataloaders=False, schedule=schedule)
    trainer(out, [first], max_steps=4).fit(TinyModel(), loader())  # step 3, the warm-up, is the last
    assert first.engine.exported == [], first.engine.exported
    second = GPUPerfCallback(output_dir=out + "/b", check_dataloaders=False, schedule=schedule)
    trainer(out, [second], max_steps=8).fit(TinyModel(), loader())
    assert len(second.engine.exported) == 1, second.engine.exported
""")


@pytest.mark.parametrize("script", [LIGHTNING_FIT, ACCELERATE_LOOP, ENDS_IN_WARMUP],
                         ids=["lightning", "accelerate", "ends-in-warm-up"])
def test_no_kineto_warning_from_our_calls(tmp_path: Path, script: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    noise = [line for line in proc.stderr.splitlines() if any(k in line for k in KINETO_NOISE)]
    assert noise == [], "\n".join(noise[:10])

"""Out-of-memory forensics through the real adapters on CPU: a Lightning Trainer and an Accelerator.

The OOM is ``torch.OutOfMemoryError`` raised where a real one would surface (``training_step``, autograd's backward,
the optimizer step, validation); CPU runs have no device counters, so ``summary.txt`` carries the host-side numbers.
The 2-process part runs this file as a script: ``python -m tests.integrations.test_oom OUT_DIR``.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from perf_callbacks import AcceleratePerfHook, GPUPerfCallback, InstrumentUnavailableWarning
from perf_callbacks.analysis.measures.text import size
from perf_callbacks.core.memory.sampler import OutOfMemoryError
from tests.integrations.lit_helpers import TinyModel, loader, trainer
from tests.integrations.oom_helpers import MESSAGE, OOMModel, RaiseInBackward

ROOT = Path(__file__).resolve().parents[2]


def oom_files(root: Path) -> dict[str, list[str]]:
    return {p.name: sorted(f.name for f in p.iterdir()) for p in root.rglob("oom-rank*")}


@pytest.mark.parametrize(("where", "step"), [("forward", 3), ("backward", 3), ("optimizer_step", 3),
                                             ("validation", 3)])  # validation follows step 3's optimizer step
def test_lightning_oom_writes_summary_naming_step_and_phase(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            where: str, step: int) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), check_dataloaders=False)
    model = OOMModel(where)
    t = trainer(tmp_path, [cb], max_steps=8, val_check_interval=4)
    with pytest.raises(OutOfMemoryError) as info:
        t.fit(model, loader(), loader(n=16))
    assert info.value is model.error and str(info.value) == MESSAGE  # the same object, message unchanged
    assert oom_files(tmp_path / "perf") == {"oom-rank0": ["summary.txt"]}  # no device: no memory_summary.txt
    (folder,) = (tmp_path / "perf").rglob("oom-rank0")
    text = (folder / "summary.txt").read_text()
    assert text.startswith(f"out of memory on rank 0 at step {step}, phase {where}\n")
    assert f"error: OutOfMemoryError: {MESSAGE}" in text
    assert "device: no device memory counters (CPU run)" in text
    rss, peak = _host_gb(text)
    assert 0 < rss <= peak  # real host numbers of this process
    if where != "validation":  # the failing training batch: 8 samples of 16 features, and their labels
        assert "batch: size 8; shapes: float32[8, 16], int64[8]" in text
    printed = capsys.readouterr().err
    assert f"perf-callbacks: out of memory on rank 0 at step {step}, phase {where}" in printed
    assert categories_line(list(model.parameters()), t.optimizers[0]) in text  # as the tensors were at the failure


def test_lightning_cli_yaml_takes_the_memory_history_keys(tmp_path: Path) -> None:
    from perf_callbacks import PerfConfigError
    from tests.integrations.lit_helpers import run_cli, write_config

    with pytest.warns(InstrumentUnavailableWarning, match="memory_history=5000"):  # CPU: nothing to record
        cli = run_cli(write_config(tmp_path, "        memory_history: 5000\n        memory_history_start: 2\n"))
    (cb,) = [c for c in cli.trainer.callbacks if isinstance(c, GPUPerfCallback)]
    assert (cb.config.memory_history, cb.config.memory_history_start) == (5000, 2)
    with pytest.raises((PerfConfigError, SystemExit, ValueError)) as info:
        run_cli(write_config(tmp_path, "        memory_history: -1\n"))
    text = str(info.value) + str(info.value.__cause__ or "") + str(info.value.__context__ or "")
    assert "memory_history must be >= 0, got -1" in text


def test_lightning_other_exceptions_write_nothing(tmp_path: Path) -> None:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), check_dataloaders=False)
    with pytest.raises(ValueError, match="user error at step 3"):
        trainer(tmp_path, [cb], max_steps=6).fit(TinyModel(fail_at_step=3), loader())
    assert oom_files(tmp_path / "perf") == {}


# ---- Accelerate --------------------------------------------------------------------------------------------------------
accelerate = pytest.importorskip("accelerate")
from accelerate import Accelerator  # noqa: E402


def accelerate_loop(acc: Accelerator, hook: AcceleratePerfHook, parts: Any, error: BaseException,
                    at: int, where: str = "backward") -> None:
    model, opt, dl = parts
    for x, y in hook.iter(dl):
        if where == "forward" and hook.optimizer_steps == at:
            raise error
        loss = nn.functional.cross_entropy(model(x), y)
        acc.backward(RaiseInBackward.apply(loss, error) if hook.optimizer_steps == at else loss)
        opt.step()
        opt.zero_grad()


@pytest.mark.usefixtures("fresh_accelerate_state")
@pytest.mark.parametrize("where", ["backward", "forward"])
def test_accelerate_oom_writes_summary_naming_step_and_phase(tmp_path: Path, where: str) -> None:
    acc = Accelerator(cpu=True)
    model = nn.Linear(16, 4)
    parts = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), loader(num_workers=0))
    hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf"), check_dataloaders=False).register(acc)
    error = OutOfMemoryError(MESSAGE)
    with pytest.raises(OutOfMemoryError) as info, hook:
        accelerate_loop(acc, hook, parts, error, at=5, where=where)
    assert info.value is error and str(info.value) == MESSAGE
    assert oom_files(tmp_path / "perf") == {"oom-rank0": ["summary.txt"]}
    text = next((tmp_path / "perf").rglob("summary.txt")).read_text()
    assert text.startswith(f"out of memory on rank 0 at step 5, phase {where}\n")
    assert "batch: size 8; shapes: float32[8, 16], int64[8]" in text
    assert "activation checkpointing" in text and "smaller batch (now 8)" in text
    assert _host_gb(text)[0] > 0
    assert categories_line(list(model.parameters()), parts[1].optimizer) in text
    assert "backward" not in vars(acc)  # the wrapper is removed as usual


def categories_line(params: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> str:
    """The summary's line for these tensors as they are now (nothing ran after the failure)."""
    p = sum(t.numel() * t.element_size() for t in params)
    g = sum(t.grad.numel() * t.grad.element_size() for t in params if t.grad is not None)
    o = sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
            if isinstance(v, torch.Tensor))
    return f"host memory by category: parameters {size(p)}, gradients {size(g)}, optimizer state {size(o)}\n"


def _host_gb(text: str) -> tuple[float, float]:
    line = next(ln for ln in text.splitlines() if ln.startswith("  host: RSS "))
    parts = line.replace(",", "").split()
    return float(parts[2]), float(parts[6])


# ---- 2 processes (gloo): only the failing rank writes, and nothing hangs ------------------------------------------
@pytest.mark.multiprocess
def test_two_processes_only_the_failing_rank_writes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "tests.integrations.test_oom", str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=150)  # a hang fails here
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r1["error"] == f"OutOfMemoryError: {MESSAGE}" and r1["same_object"]
    assert r0["error"] is not None and "OutOfMemoryError" not in r0["error"]  # rank 0 timed out in the collective
    assert oom_files(tmp_path / "perf") == {"oom-rank1": ["summary.txt"]}
    text = next((tmp_path / "perf").rglob("summary.txt")).read_text()
    assert text.startswith("out of memory on rank 1 at step 3, phase backward\n")
    assert "perf-callbacks: out of memory on rank 1 at step 3, phase backward" in proc.stderr


@pytest.mark.multiprocess
@pytest.mark.slow
def test_lightning_ddp_only_the_failing_rank_writes(tmp_path: Path) -> None:
    from tests.integrations.ddp_helpers import launch

    proc = launch(tmp_path, "--fail-rank", "1", "--oom")  # subprocess.run's timeout fails the test on a hang
    assert proc.returncode != 0 and MESSAGE in proc.stderr
    assert oom_files(tmp_path / "perf") == {"oom-rank1": ["summary.txt"]}
    text = next((tmp_path / "perf").rglob("oom-rank1/summary.txt")).read_text()
    assert text.startswith("out of memory on rank 1 at step 4, phase forward\n")


def _rank_main(rank: int, out: Path, port: int) -> None:
    from accelerate.utils import InitProcessGroupKwargs

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    acc = Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=15))])
    model = nn.Linear(16, 4)
    parts = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), loader(num_workers=0))
    hook = AcceleratePerfHook(output_dir=str(out / "perf"), check_dataloaders=False).register(acc)
    error = OutOfMemoryError(MESSAGE)
    result: dict[str, Any] = {"error": None}
    try:
        with hook:
            accelerate_loop(acc, hook, parts, error, at=3 if rank == 1 else -1)
    except Exception as err:  # noqa: BLE001 - rank 0 sees the collective time out
        result.update(error=f"{type(err).__name__}: {err}"[:300], same_object=err is error)
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    os._exit(0)  # leave without the process group's teardown, which would wait for the other rank


if __name__ == "__main__":
    from tests.integrations.acc_helpers import _free_port

    torch.multiprocessing.start_processes(_rank_main, args=(Path(sys.argv[1]), _free_port()), nprocs=2,
                                          start_method="fork")

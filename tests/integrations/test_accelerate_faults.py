"""AcceleratePerfHook when things go wrong: interrupts, bad ranks, checkpoints, and a rank failing under gloo.

The 2-process part runs this file as a script: ``python -m tests.integrations.test_accelerate_faults OUT_DIR``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs
from torch import nn

from perf_callbacks import AcceleratePerfHook, PerfConfigError
from perf_callbacks.integrations.accelerate import STATE_FILE
from tests.integrations.acc_helpers import (
    _free_port,
    data,
    profiler_steps,
    setup,
    train,
    windows,
)

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # conftest.py
ROOT = Path(__file__).resolve().parents[2]
LONG_WINDOW = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 4}  # warm-up step 2, records steps 3-6


def interrupted_loop(acc: Accelerator, hook: AcceleratePerfHook, parts: Any, error: BaseException) -> None:
    """Raise ``error`` at the start of optimizer step 4, before its forward: steps 3 and 4 are in the trace."""
    model, opt, dl = parts
    for x, y in hook.iter(dl):
        if hook.optimizer_steps == 4:
            raise error
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()


def summary_head(trace: Path) -> str:
    return (trace.parent / "summary.txt").read_text().splitlines()[0]


@pytest.mark.parametrize("error", [ValueError("user error"), KeyboardInterrupt()], ids=["exception", "ctrl-c"])
def test_interrupted_run_flushes_exact_steps_and_says_so(tmp_path: Path, error: BaseException) -> None:
    acc, hook, parts = setup(tmp_path, schedule=LONG_WINDOW)
    with pytest.raises(type(error)) as info, hook:
        interrupted_loop(acc, hook, parts, error)
    assert info.value is error
    assert not torch.autograd.profiler._is_profiler_enabled
    # the window is named by the steps that ran: 3, and 4, interrupted before its forward; 5 and 6 never began
    assert windows(tmp_path / "perf") == {"window-000003-000004": ["rank0.pt.trace.json.gz"]}
    (trace,) = hook.engine.exported
    assert profiler_steps(trace) == {3, 4}
    assert summary_head(trace) == ("perf-callbacks summary: steps 3-4, rank 0 (partial: 1 of 4 scheduled steps "
                                   f"completed; interrupted by {type(error).__name__})")


SIGTERM_SCRIPT = """
import os, signal, sys, torch
from torch import nn
from accelerate import Accelerator
from perf_callbacks import AcceleratePerfHook
from tests.integrations.acc_helpers import data

acc = Accelerator(cpu=True)
model = nn.Linear(8, 1)
model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data())
with AcceleratePerfHook(output_dir=sys.argv[1], schedule={"skip_first": 2, "wait": 0, "warmup": 1, "active": 4},
                        check_dataloaders=False).register(acc) as hook:
    for x, y in hook.iter(dl):
        if hook.optimizer_steps == 4:
            os.kill(os.getpid(), signal.SIGTERM)  # preemption at the start of step 4, mid-window
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
print("not reached")
"""


def test_sigterm_flushes_exact_steps_says_so_and_exits_143(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", SIGTERM_SCRIPT, str(tmp_path / "perf")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 143, proc.stderr[-2000:]
    assert "not reached" not in proc.stdout
    (trace,) = (tmp_path / "perf").rglob("rank0.pt.trace.json.gz")
    assert trace.parent.name == "window-000003-000004"
    assert profiler_steps(trace) == {3, 4}
    assert summary_head(trace) == ("perf-callbacks summary: steps 3-4, rank 0 (partial: 1 of 4 scheduled steps "
                                   "completed; interrupted by SystemExit)")


def test_ranks_beyond_the_world_size_fail_at_register() -> None:
    acc = Accelerator(cpu=True)
    hook = AcceleratePerfHook(ranks=[1])  # on one process: rank 0 only
    with pytest.raises(PerfConfigError, match=r"ranks=\[1\] names ranks beyond the world size 1; valid ranks are 0-0"):
        hook.register(acc)
    assert hook.engine is None and "backward" not in vars(acc)


def _prepared(seed: int) -> tuple[Accelerator, Any]:
    torch.manual_seed(seed)
    acc = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    return acc, acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), data())


def _weights(parts: Any) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in parts[0].parameters()])


def _reset() -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_checkpoints_load_with_and_without_the_hook(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    acc, parts = _prepared(seed=0)
    with AcceleratePerfHook(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 100}).register(acc) as hook:
        train(acc, hook, parts, stop_at=3)
        acc.save_state(str(tmp_path / "with_hook"))
    trained = _weights(parts)
    assert json.loads((tmp_path / "with_hook" / STATE_FILE).read_text()) == {"optimizer_steps": 3}

    _reset()
    acc, parts = _prepared(seed=1)  # other initial weights: loading must restore the trained ones
    acc.load_state(str(tmp_path / "with_hook"))  # no hook: the extra file is ignored
    assert torch.equal(_weights(parts), trained)
    acc.save_state(str(tmp_path / "plain"))
    assert not (tmp_path / "plain" / STATE_FILE).exists()

    for ckpt, steps in (("with_hook", 3), ("plain", 0)):
        _reset()
        acc, parts = _prepared(seed=2)
        hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf")).register(acc)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="perf_callbacks"):
            acc.load_state(str(tmp_path / ckpt))
        hook.close()
        assert hook.optimizer_steps == steps
        assert torch.equal(_weights(parts), trained)
        assert (f"has no {STATE_FILE}" in caplog.text) is (ckpt == "plain")


# ---- one rank fails while the other is still training (gloo, 2 processes) ---------------------------------------------
PG_TIMEOUT_S = 5


@pytest.mark.multiprocess
def test_a_failing_rank_leaves_the_healthy_rank_free_to_exit(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "tests.integrations.test_accelerate_faults", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r1["error"] == "ValueError: user error at step 4"
    # the failing rank's own close holds no collective (it takes milliseconds): one (a barrier, even in a try/except)
    # would wait for rank 0, busy in its gradient all-reduce, for the whole process-group timeout
    assert r1["close_s"] < PG_TIMEOUT_S / 2, r1
    # rank 0 was still training: its next gradient all-reduce waited for rank 1 until the process-group timeout,
    # then raised; the hook held no collective of its own, so rank 0 got out and flushed its partial window
    assert r0["error"].startswith("RuntimeError") and r0["seconds_after_rank1_failed"] < 6 * PG_TIMEOUT_S, r0
    assert not r0["profiler_enabled"] and not r1["profiler_enabled"]
    (run,) = [p for p in (tmp_path / "perf").iterdir() if p.is_dir()]
    # each rank's partial window is named by the steps it ran: rank 1 failed in step 4, rank 0 may have got further
    assert profiler_steps(run / "window-000003-000004" / "rank1.pt.trace.json.gz") == {3, 4}
    (rank0,) = run.glob("window-000003-*/rank0.pt.trace.json.gz")
    assert {3, 4} <= profiler_steps(rank0)


def _rank_main(rank: int, out: Path, port: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    acc = Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend="gloo",
                                                                        timeout=timedelta(seconds=PG_TIMEOUT_S))])
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(256))
    failed = out / "rank1_failed"
    result: dict[str, Any] = {}
    try:
        with AcceleratePerfHook(output_dir=str(out / "perf"), schedule=LONG_WINDOW, check_dataloaders=False,
                                summary=False).register(acc) as hook:  # no analysis: close() is the hook's own work
            for x, y in hook.iter(dl):
                if rank == 1 and hook.optimizer_steps == 4:
                    failed.write_text(str(time.time()))
                    t_raise = time.perf_counter()
                    raise ValueError("user error at step 4")
                acc.backward(nn.functional.mse_loss(model(x), y))
                opt.step()
                opt.zero_grad()
    except Exception as err:  # noqa: BLE001
        result["error"] = f"{type(err).__name__}: {err}"
        if rank == 1:  # the hook's close() ran in between: the failing rank's own close
            result["close_s"] = time.perf_counter() - t_raise
    result["profiler_enabled"] = bool(torch.autograd.profiler._is_profiler_enabled)
    if rank == 0 and failed.exists():
        result["seconds_after_rank1_failed"] = time.time() - float(failed.read_text())
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    if rank == 1:  # a failed rank whose process lingers (e.g. in its own error handling) until rank 0 is done
        deadline = time.time() + 20 * PG_TIMEOUT_S
        while not (out / "rank0.json").exists() and time.time() < deadline:
            time.sleep(0.1)


if __name__ == "__main__":
    torch.multiprocessing.start_processes(_rank_main, args=(Path(sys.argv[1]), _free_port()), nprocs=2,
                                          start_method="fork")

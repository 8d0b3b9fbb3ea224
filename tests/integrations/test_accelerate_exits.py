"""How an Accelerate run ends: a hook never closed, and a preemption right after an optimizer step.

Each case runs a real ``Accelerator`` loop in a subprocess, as a user's script would: the flush at interpreter exit
only happens when the interpreter exits, and SIGTERM comes from outside (the parent sends it once the child says,
through a marker file, that it is where the signal should land; no fixed sleep).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}

UNCLOSED = """
import os, signal, sys, torch
from torch import nn
from accelerate import Accelerator
from perf_callbacks import AcceleratePerfHook
from tests.integrations.acc_helpers import data

out, mode, end, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
acc = Accelerator(cpu=True)
model = nn.Linear(8, 1)
model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(160, num_workers=0))
hook = AcceleratePerfHook(output_dir=out, check_dataloaders=False, log_every_n_steps=5).register(acc)  # default schedule

def loop():
    for x, y in hook.iter(dl):
        if end == "fetch" and hook.optimizer_steps == steps:
            break  # right after the fetch of the next step's batch
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
        if hook.optimizer_steps == steps and end != "fetch":  # right after the last step's opt.step()
            if end == "raise":
                raise ValueError("user error after an optimizer step")
            if end == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            break

if mode == "with":
    with hook:
        loop()
else:
    loop()  # the hook is never closed: it is flushed at interpreter exit
"""


def run_unclosed(out: Path, mode: str, end: str, steps: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", UNCLOSED, str(out), mode, end, str(steps)], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def written(out: Path) -> dict[str, Any]:
    """What a run left in its output folder, less what differs between two runs (times, pids, the run's name)."""
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    found: dict[str, Any] = {"files": sorted(str(p.relative_to(run)) for p in run.rglob("*")
                                             if p.is_file() and "tfevents" not in p.name)}
    for w in sorted(run.glob("window-*")):
        events = json.load(gzip.open(w / "rank0.pt.trace.json.gz"))["traceEvents"]
        meta = json.loads((w / "rank0.summary.json").read_text())["meta"]
        meta.pop("stall_ms", None)
        found[w.name] = {
            "steps": sorted(int(e["name"].split("#")[1]) for e in events
                            if str(e.get("name", "")).startswith("ProfilerStep#")),
            "header": (w / "summary.txt").read_text().splitlines()[0],
            "meta": meta,
        }
    found["scalars"] = _scalars(run / "tensorboard")
    return found


def _scalars(logdir: Path) -> dict[str, list[int]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.slow
@pytest.mark.parametrize(("end", "steps", "window", "header"), [
    ("break", 13, "window-000012-000012", "steps 12-12, rank 0 (partial: 1 of 3 scheduled steps completed)"),
    ("break", 14, "window-000012-000013", "steps 12-13, rank 0 (partial: 2 of 3 scheduled steps completed)"),
    ("fetch", 13, "window-000012-000012", "steps 12-12, rank 0 (partial: 1 of 3 scheduled steps completed)"),
    ("raise", 14, "window-000012-000013",
     "steps 12-13, rank 0 (partial: 2 of 3 scheduled steps completed; interrupted by ValueError)"),
    ("sigterm", 14, "window-000012-000013",
     "steps 12-13, rank 0 (partial: 2 of 3 scheduled steps completed; interrupted by SystemExit)"),
], ids=["break-13", "break-14", "fetch-13", "raise-14", "sigterm-14"])
def test_a_hook_never_closed_writes_what_closing_it_writes(
    tmp_path: Path, end: str, steps: int, window: str, header: str
) -> None:
    """The flush at exit closes the hook as the ``with`` block does: same windows, traces, summaries and metrics."""
    procs = {mode: run_unclosed(tmp_path / mode, mode, end, steps) for mode in ("with", "unclosed")}
    outs = {mode: proc.communicate(timeout=300) for mode, proc in procs.items()}
    codes = {"break": 0, "fetch": 0, "raise": 1, "sigterm": 143}
    for mode, proc in procs.items():
        assert proc.returncode == codes[end], outs[mode][1][-3000:]
        assert "no profiling window was recorded" not in outs[mode][1]
    closed, unclosed = written(tmp_path / "with"), written(tmp_path / "unclosed")
    assert unclosed == closed
    assert [k for k in closed if k.startswith("window-")] == [window]
    assert closed[window]["header"] == f"perf-callbacks summary: {header}"
    first, last = (int(n) for n in window.split("-")[1:])
    assert closed[window]["steps"] == closed[window]["meta"]["steps"] == list(range(first, last + 1))


PREEMPTED = """
import sys, time, torch
from pathlib import Path
from torch import nn
from accelerate import Accelerator
from perf_callbacks import AcceleratePerfHook
from tests.integrations.acc_helpers import data

out, where = Path(sys.argv[1]), sys.argv[2]
acc = Accelerator(cpu=True)
model = nn.Linear(8, 1)
model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(160, num_workers=0))

def wait_for_sigterm():
    (out / "marker").write_text(where)  # the parent sends SIGTERM once it sees this
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit("no SIGTERM came")

with AcceleratePerfHook(output_dir=str(out / "perf"), schedule={"skip_first": 5, "wait": 0, "warmup": 1, "active": 4},
                        check_dataloaders=False).register(acc) as hook:
    acc.register_save_state_pre_hook(lambda *args: wait_for_sigterm())  # after the hook's own: the count is saved
    for x, y in hook.iter(dl):
        acc.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
        if hook.optimizer_steps == 7:  # right after step 6's opt.step()
            if where == "validation":
                with hook.validation():
                    wait_for_sigterm()
            else:
                acc.save_state(str(out / "checkpoint"))
print("not reached")
"""


@pytest.mark.parametrize("where", ["validation", "checkpoint"])
def test_sigterm_right_after_an_optimizer_step_counts_that_step(tmp_path: Path, where: str) -> None:
    """Step 6 completed its optimizer step before the preemption: the window says so, as the saved state does."""
    proc = subprocess.Popen([sys.executable, "-c", PREEMPTED, str(tmp_path), where], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "marker").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "marker").exists(), "the child never reached the preemption point"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 143, err[-3000:]
    assert "not reached" not in out
    if where == "checkpoint":
        assert json.loads((tmp_path / "checkpoint" / "perf_callbacks_state.json").read_text()) == {"optimizer_steps": 7}
    (trace,) = (tmp_path / "perf").rglob("rank0.pt.trace.json.gz")
    assert trace.parent.name == "window-000006-000006"
    assert (trace.parent / "summary.txt").read_text().splitlines()[0] == (
        "perf-callbacks summary: steps 6-6, rank 0 (partial: 1 of 4 scheduled steps completed; interrupted by "
        "SystemExit)")

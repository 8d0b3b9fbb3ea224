"""Captured windows in real Lightning, Accelerate and transformers runs (issue 40, parts 1, 2 and 4).

Steps are made ~10 ms by a sleep and a planted step sleeps 0.5 s, or, in the three tests of the issue's case (one per
adapter), ~100 ms and step 37 about 3x that (``capture_helpers.THREE_X``): the ratio is the test's, not the
machine's. The default schedule records steps 12-14 (Lightning) or 3-4 (the others); a capture holds the next
``schedule.active`` steps after the slow one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn
from transformers import TrainerCallback

from perf_callbacks import AcceleratePerfHook, GPUPerfCallback, TransformersPerfCallback
from tests.integrations import capture_helpers as ch
from tests.integrations.acc_helpers import data
from tests.integrations.hf_helpers import make_trainer
from tests.integrations.lit_helpers import TinyModel, loader, trainer
from tests.integrations.loader_helpers import busy

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # conftest.py


class Planted(TinyModel):
    """Each training step sleeps ``STEP_S``, the ``spikes`` steps ``SPIKE_S``; ``at``: a hook run at those steps."""

    def __init__(self, spikes: tuple[int, ...] = (), at: dict[int, Any] | None = None,
                 times: tuple[float, float] = (ch.STEP_S, ch.SPIKE_S)) -> None:
        super().__init__()
        self.spikes, self.at, self.times = spikes, at or {}, times

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        step = self.trainer.global_step
        ch.sleep_for(step, self.spikes, self.times)
        if step in self.at:
            self.at[step]()
        return super().training_step(batch, batch_idx)


def fit(tmp_path: Path, model: Planted, steps: int, **options: Any) -> GPUPerfCallback:
    cb = GPUPerfCallback(output_dir=str(tmp_path / "perf"), **{**ch.OPTIONS, **options})
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    trainer(tmp_path, [cb], max_steps=steps, logger=logger, limit_val_batches=0, log_every_n_steps=10).fit(
        model, loader(n=8 * steps))
    return cb


def test_lightning_a_slow_step_opens_one_window_at_the_next_with_its_reason(tmp_path: Path) -> None:
    fit(tmp_path, Planted(spikes=(37,), times=ch.THREE_X), steps=45)  # step 37 takes 3x the median
    found = ch.windows(tmp_path / "perf")
    assert list(found) == ["window-000012-000014", "window-000038-000040"]
    capture = found["window-000038-000040"]
    assert capture["reason"] == "anomaly" and capture["step"] == 37
    # about 3x: the planted sleeps are the least of each (a loaded machine delays the slow step further: 3.56x seen at
    # a load of 5 on 2 cores); under 4.3x, what the slow step measured together with a neighbour's 100 ms would reach
    step_s, spike_s = ch.THREE_X
    assert capture["step_ms"] >= 1e3 * spike_s and capture["median_ms"] >= 1e3 * step_s
    assert capture["ratio"] == pytest.approx(capture["step_ms"] / capture["median_ms"], rel=0.01)
    assert 2.5 < capture["ratio"] < (spike_s + step_s) / step_s, capture
    (summary,) = (tmp_path / "perf").glob("*/window-000038-000040/summary.txt")
    assert f"captured: step 37 took {capture['step_ms']:,.0f} ms, {capture['ratio']:.1f}x the median" in \
        summary.read_text()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = list((tmp_path / "tb").rglob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events.parent))
    acc.Reload()
    assert [e.step for e in acc.Scalars("perf/capture")] == [38]  # TensorBoard marks where the trace is
    assert any(tag.startswith("perf/capture") for tag in acc.Tags()["tensors"])  # and why (a text summary)


def test_report_says_why_and_compares_with_the_nearest_scheduled_window(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    fit(tmp_path, Planted(spikes=(37, 38, 39)), steps=45)  # 38 and 39, in the window, are slow too: it shows them
    from perf_callbacks.cli import main

    capsys.readouterr()
    assert main(["report", str(tmp_path / "perf")]) == 0
    text = capsys.readouterr().out
    (capture,) = [c for c in ch.windows(tmp_path / "perf").values() if c]
    assert f"  window-000038-000040: step 37 took {capture['step_ms']:,.0f} ms, {capture['ratio']:.1f}x the median" \
        in text
    line = text.split("window-000038-000040: step 37 took", 1)[1].splitlines()[1]
    assert line.startswith("    against window-000012-000014 (scheduled): step time +")
    assert main(["report", str(tmp_path / "perf"), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["captures"]
    assert entry["window"] == "window-000038-000040" and entry["baseline"] == "window-000012-000014"
    assert entry["capture"] == capture and entry["step_time_ms"] > entry["baseline_step_time_ms"]


def test_lightning_the_budget_holds_under_repeated_anomalies(tmp_path: Path) -> None:
    """Slow steps at 25, 27 (inside the first capture), 31, 37, 43: two windows an hour, never overlapping."""
    fit(tmp_path, Planted(spikes=(25, 27, 31, 37, 43)), steps=48, capture_max_per_hour=2)
    found = ch.windows(tmp_path / "perf")
    assert list(found) == ["window-000012-000014", "window-000026-000028", "window-000032-000034"]
    assert [found[w].get("step") for w in list(found)[1:]] == [25, 31]


def test_lightning_no_anomaly_window_without_the_option(tmp_path: Path) -> None:
    fit(tmp_path, Planted(spikes=(37,)), steps=40, capture_on_anomaly=False)
    assert list(ch.windows(tmp_path / "perf")) == ["window-000012-000014"]


def test_lightning_a_healthy_noisy_run_opens_no_window(tmp_path: Path) -> None:
    """Steps of 10 ms (sleep) plus the model's own, with other processes taking the cores: no anomaly.

    Two processes spin on every core this process may use while it trains (as ``../shared/tools/burn.py 2`` does), on
    top of whatever else the machine runs: the steps the machine delays are left out by their CPU wait, and the bar is
    at least 2.5x the median.
    """
    with busy(os.sched_getaffinity(0), 2):
        fit(tmp_path, Planted(), steps=150, summary=False)
    found = ch.windows(tmp_path / "perf")
    assert list(found) == ["window-000012-000014"], found  # the capture block of any other: why it opened


def test_lightning_the_signal_opens_a_window_at_the_next_step_and_the_user_handler_stays(tmp_path: Path) -> None:
    calls: list[int] = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    mine = signal.getsignal(signal.SIGUSR2)
    try:
        kill = lambda: os.kill(os.getpid(), signal.SIGUSR2)  # noqa: E731
        fit(tmp_path / "on", Planted(at={20: kill}), steps=26, capture_on_anomaly=False)
        assert list(ch.windows(tmp_path / "on" / "perf")) == ["window-000012-000014", "window-000021-000023"]
        assert ch.windows(tmp_path / "on" / "perf")["window-000021-000023"] == {
            "reason": "signal", "step": 20, "step_ms": None, "median_ms": None, "ratio": None, "request": "SIGUSR2"}
        assert calls == [signal.SIGUSR2]  # the handler it replaced was called too
        assert signal.getsignal(signal.SIGUSR2) is mine  # and is back after the run
        fit(tmp_path / "off", Planted(at={20: kill}), steps=26, capture_signal=None)
        assert list(ch.windows(tmp_path / "off" / "perf")) == ["window-000012-000014"]  # no handler: nothing
        assert calls == [signal.SIGUSR2] * 2
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_lightning_a_request_file_dropped_by_hand_opens_a_window_at_the_next_step(tmp_path: Path) -> None:
    """The request file written without the CLI (its documented JSON) into ``output_dir`` at step 20: steps 21-22 are
    recorded once (the file stays, and the run goes on to step 30); the step waits until the rank's thread saw it."""

    def drop() -> None:
        (tmp_path / "perf" / "capture").write_text(json.dumps({"id": "by-hand", "steps": 2}))
        (cb,) = [c for c in model.trainer.callbacks if isinstance(c, GPUPerfCallback)]  # type: ignore[attr-defined]
        assert cb.engine is not None
        ch.wait_served(cb.engine)

    model = Planted(at={20: drop})
    fit(tmp_path, model, steps=30, capture_on_anomaly=False, capture_poll_s=0.05)
    found = ch.windows(tmp_path / "perf")
    assert list(found) == ["window-000012-000014", "window-000021-000022"]
    assert found["window-000021-000022"]["reason"] == "file"
    assert found["window-000021-000022"]["request"] == "by-hand"


def test_accelerate_a_slow_step_opens_one_window(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data(4 * 45, num_workers=0))
    hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 2, "wait": 0, "warmup": 1,
                                                                           "active": 2}, **ch.OPTIONS)
    with hook.register(acc):
        for x, y in hook.iter(dl):
            ch.sleep_for(hook.optimizer_steps, (37,), ch.THREE_X)
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
    found = ch.windows(tmp_path / "perf")
    assert list(found) == ["window-000003-000004", "window-000038-000039"]
    assert found["window-000038-000039"]["step"] == 37 and found["window-000038-000039"]["reason"] == "anomaly"


class SleepEachStep(TrainerCallback):
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        ch.sleep_for(state.global_step, (37,), ch.THREE_X)


def test_transformers_a_slow_step_opens_one_window(tmp_path: Path) -> None:
    cb = TransformersPerfCallback(output_dir=str(tmp_path / "perf"), schedule={"skip_first": 2, "wait": 0,
                                                                               "warmup": 1, "active": 2}, **ch.OPTIONS)
    make_trainer(tmp_path / "hf", [cb, SleepEachStep()], max_steps=45, n=4 * 45, logging_steps=10).train()
    found = ch.windows(tmp_path / "perf")
    assert list(found) == ["window-000003-000004", "window-000038-000039"]
    assert found["window-000038-000039"]["step"] == 37 and found["window-000038-000039"]["reason"] == "anomaly"


@pytest.mark.multiprocess
def test_a_capture_request_opens_the_same_steps_on_both_ddp_ranks(tmp_path: Path) -> None:
    """Two Accelerate DDP ranks (gloo), rank 1 slower per step: rank 0 runs ``perf-callbacks capture OUT --steps 2`` at
    step 10 and neither rank waits for its thread; both record the same two steps (the agreed ones, after step 10 and
    before the run's end at step 40), once (the file stays)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "tests.integrations.capture_two_ranks", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "perf"
    traces = sorted(str(p.relative_to(run)).split("/", 1)[1] for p in run.glob("*/window-*/*.gz"))
    captured = [t.split("/")[0] for t in traces if not t.startswith("window-000003-000004/")]
    assert len(captured) == 2 and captured[0] == captured[1], traces  # one window, both ranks' traces
    first, last = (int(n) for n in captured[0].removeprefix("window-").split("-"))
    assert first >= 11 and last == first + 1 and last < 40
    assert traces.count(f"{captured[0]}/rank0.pt.trace.json.gz") == 1
    assert ch.windows(run)[captured[0]]["reason"] == "file"
    assert "capture request" in proc.stdout and (run / "capture").is_file()

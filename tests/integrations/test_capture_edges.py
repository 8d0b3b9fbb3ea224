"""Request files at their edges in real Lightning runs (issue 54, part 1): nothing there can hold the training thread.

Each case is measured against a run the test makes alike but for the one thing it tests (no request files, or a
short request), in the same test: step 0's start after ``fit()`` is called, the time from the last step to the end
of ``fit()``, and the longest step. Steps sleep ``STEP_S``: the step time is the test's, not the machine's.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest

from perf_callbacks import GPUPerfCallback
from perf_callbacks.core.triggers.captures import MAX_REQUEST_STEPS
from perf_callbacks.core.triggers.requests import CLOSE_WAIT_S
from tests.integrations import capture_helpers as ch
from tests.integrations.lit_helpers import TinyModel, loader, trainer
from tests.silent_server import SilentServer, silent_fixture  # noqa: F401 - the fixture

STEP_S = 0.05
NO_WINDOW = {"skip_first": 10_000}  # no scheduled window: nothing to upload, nothing but the request to record
QUIET: dict[str, Any] = {"check_dataloaders": False, "degradation_threshold": 1e6, "data_wait_steps": 1000,
                         "log_every_n_steps": 10, "capture_on_anomaly": False}


class Clock(L.Callback):
    """When each training step starts (listed before the profiler's callback: its work at a step start counts)."""

    def __init__(self, at: dict[int, Any] | None = None) -> None:
        self.starts: list[float] = []
        self.at = at or {}

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self.starts.append(time.perf_counter())

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        time.sleep(STEP_S)
        hook = self.at.get(trainer.global_step - 1)
        if hook is not None:
            hook(trainer)


def timed_fit(tmp_path: Path, steps: int, clock: Clock, **options: Any) -> tuple[float, float, GPUPerfCallback]:
    """Fit ``steps`` steps: (step 0's start after fit() was called, the end of fit() after the last step's start)."""
    cb = GPUPerfCallback(**{**QUIET, **options})
    t = trainer(tmp_path, [clock, cb], max_steps=steps, limit_val_batches=0)
    t0 = time.perf_counter()
    t.fit(TinyModel(), loader(n=8 * steps))
    end = time.perf_counter()
    assert t.global_step == steps and t.state.finished
    return clock.starts[0] - t0, end - clock.starts[-1], cb


@pytest.fixture(autouse=True)
def staging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERF_CALLBACKS_STAGING", str(tmp_path / "staging"))


def test_a_silent_endpoint_never_delays_step_0_nor_the_end(tmp_path: Path, silent: SilentServer) -> None:
    """An ``s3://`` output_dir whose endpoint accepts connections and never answers (for 30 s, then it closes)."""
    options = {"output_dir": "s3://bucket/perf", "storage_options": silent.options, "schedule": NO_WINDOW}
    base_start, base_end, _ = timed_fit(tmp_path / "base", 8, Clock(), capture_poll_s=0, **options)
    start, end, _ = timed_fit(tmp_path / "run", 8, Clock(), capture_poll_s=0.05, **options)
    assert silent.accepted >= 1  # the request thread did ask it
    # the old first look ran on the training thread: step 0 waited for botocore's retries (the server's 30 s here)
    assert start < base_start + 2.0, (start, base_start)
    assert end < base_end + CLOSE_WAIT_S + 1.0, (end, base_end)  # closing waits for the thread CLOSE_WAIT_S at most


def test_a_fifo_named_capture_never_delays_step_0(tmp_path: Path) -> None:
    out = tmp_path / "run" / "perf"
    out.mkdir(parents=True)
    os.mkfifo(out / "capture")
    stop = threading.Event()

    def unblock() -> None:  # after 5 s, a writer: a reader stuck on the FIFO (the old one) gets its end, late
        if stop.wait(5.0):
            return
        with contextlib.suppress(OSError):  # nobody reads it: as it should be
            os.close(os.open(out / "capture", os.O_WRONLY | os.O_NONBLOCK))

    threading.Thread(target=unblock, daemon=True).start()
    try:
        base_start, _, _ = timed_fit(tmp_path / "base", 8, Clock(), output_dir=str(tmp_path / "base" / "perf"),
                                     schedule=NO_WINDOW, capture_poll_s=0.05)
        start, _, _ = timed_fit(tmp_path / "run", 8, Clock(), output_dir=str(out), schedule=NO_WINDOW,
                                capture_poll_s=0.05)
    finally:
        stop.set()
    assert start < base_start + 2.0, (start, base_start)
    assert (out / "capture").is_fifo()


def drop(out: Path, request_id: str, steps: int) -> Any:
    def hook(trainer: L.Trainer) -> None:
        (out / "capture").write_text(json.dumps({"id": request_id, "steps": steps}))
        (cb,) = [c for c in trainer.callbacks if isinstance(c, GPUPerfCallback)]  # type: ignore[attr-defined]
        ch.wait_served(cb.engine)

    return hook


def test_a_huge_steps_request_costs_a_step_what_a_short_one_does(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Steps 11-12 on a request for 2 steps dropped at step 10, then from 21 on one for 10**12 steps (capped) dropped
    at step 20: the steps that take, lay out and record the long window are within 2x of those of the short one,
    measured in the same run (each dropping step also waits until the request thread took the request)."""
    out = tmp_path / "perf"
    clock = Clock(at={10: drop(out, "short", 2), 20: drop(out, "huge", 10**12)})
    with caplog.at_level(logging.INFO, logger="perf_callbacks.core.triggers.captures"):
        _, _, cb = timed_fit(tmp_path, 26, clock, output_dir=str(out), capture_poll_s=0.05,
                             schedule={"skip_first": 3, "wait": 0, "warmup": 1, "active": 2, "repeat": 1})
    took = [b - a for a, b in itertools.pairwise(clock.starts)]  # took[k]: step k, from its start to the next's
    short, long = max(took[10:13]), max(took[20:25])
    assert long < 2 * short, (took[10:13], took[20:25])
    assert f"perf-callbacks: file request huge asks for {10**12} steps: capped at {MAX_REQUEST_STEPS} " \
           "(MAX_REQUEST_STEPS)" in caplog.messages
    plan = cb.engine.windows.schedule.plan if cb.engine is not None else None
    assert plan is not None and (plan.first, plan.last) == (21, 21 + MAX_REQUEST_STEPS - 1)
    found = ch.windows(out)
    assert found["window-000011-000012"]["request"] == "short"
    assert [c.get("request") for c in found.values()] == [None, "short", "huge"], found

"""``output_dir`` on object storage (issue 28): a real S3 server on loopback (moto), Lightning fits on CPU.

The bucket gets the files a local run writes, in the same layout; a missing bucket, wrong credentials, an endpoint
that refuses connections and a server stopped mid-run each give one warning, a finished run, and the files kept in the local
staging folder that the warning names; a server that takes 2 s per request never makes a training hook wait.
"""

from __future__ import annotations

import json
import logging
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import pytest

from perf_callbacks import GPUPerfCallback, InstrumentUnavailableWarning
from perf_callbacks.cli import main
from perf_callbacks.core.files import remote
from tests.integrations.lit_helpers import TinyModel, loader, trainer
from tests.s3_server import S3Server, s3_fixture  # noqa: F401 - the fixture

WINDOW = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}  # records steps 3-4
TWO_WINDOWS = {"skip_first": 2, "wait": 2, "warmup": 1, "active": 2, "repeat": 2}  # steps 5-6, then 10-11
FAST_FAIL = {"config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2, "read_timeout": 5}}


@pytest.fixture(autouse=True)
def staging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "staging"
    monkeypatch.setenv("PERF_CALLBACKS_STAGING", str(folder))
    monkeypatch.setattr(remote, "RETRY_DELAYS_S", (0.05, 0.1, 0.2))
    return folder


def fit(tmp_path: Path, output_dir: str, storage_options: dict[str, Any] | None = None, steps: int = 8,
        schedule: dict[str, int] | None = None, callbacks: list[L.Callback] | None = None) -> L.Trainer:
    cb = GPUPerfCallback(output_dir=output_dir, storage_options=storage_options, schedule=schedule or WINDOW)
    t = trainer(tmp_path, [cb, *(callbacks or [])], max_steps=steps)
    t.fit(TinyModel(), loader())
    assert t.global_step == steps and t.state.finished  # the run always finishes
    return t


def relative_files(root: Path) -> set[str]:
    """Files under each run folder of ``root``, named without the run folder (``window-.../rank0.summary.json``)."""
    return {_named(p.relative_to(run).as_posix()) for run in root.iterdir() for p in run.rglob("*") if p.is_file()}


def remote_files(server: S3Server, prefix: str) -> set[str]:
    return {_named(p.split("/", 3)[3]) for p in server.fs().find(prefix)}  # bucket/perf/<run>/...


def _named(path: str) -> str:
    """An event file's name without its time, host and pid."""
    return re.sub(r"events\.out\.tfevents\..*", "events.out.tfevents", path)


def staged(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def upload_warnings(seen: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in seen if issubclass(w.category, InstrumentUnavailableWarning)
            and "uploads disabled" in str(w.message)]


def test_lightning_fit_to_s3_writes_the_files_of_a_local_run(tmp_path: Path, s3: S3Server, staging: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    s3.fs().mkdir("perf-fit")
    fit(tmp_path / "a", str(tmp_path / "local"))
    fit(tmp_path / "b", "s3://perf-fit/perf", s3.options)
    local = relative_files(tmp_path / "local")
    assert {"window-000003-000004/rank0.pt.trace.json.gz", "window-000003-000004/rank0.summary.json",
            "window-000003-000004/summary.txt"} <= local
    assert remote_files(s3, "perf-fit/perf") == local
    assert (staging / "perf-callbacks-staging").is_dir()  # it was staged there
    assert staged(staging) == []  # every local copy removed once its upload was confirmed
    summary = s3.fs().cat_file(next(p for p in s3.fs().find("perf-fit/perf") if p.endswith("summary.txt")))
    assert b"trace: s3://perf-fit/perf/" in summary  # where the user finds it, not the staging folder

    copy = tmp_path / "copy"  # the report of the bucket is that of a local copy of it
    s3.fs().get("perf-fit/perf/", str(copy), recursive=True)
    capsys.readouterr()
    assert main(["report", str(copy)]) == 0
    here = capsys.readouterr().out
    options = json.dumps({"client_kwargs": s3.options["client_kwargs"]})
    assert main(["report", "s3://perf-fit/perf", "--storage-options", options]) == 0
    there = capsys.readouterr().out
    # a verdict (compute_bound on an idle machine, cpu_contention on one kept busy), the same read from the bucket;
    # the ledger, last, only from the local copy: a URL's step record is not fetched (docs/reference/ledger.md)
    assert "\nledger: " in here and "\nledger" not in there
    here = here[:here.index("ledger: ")]
    assert "\nverdict: " in here and there == here.replace(str(copy), "s3://perf-fit/perf")


def test_a_missing_bucket_warns_once_and_keeps_the_files(tmp_path: Path, s3: S3Server, staging: Path) -> None:
    with pytest.warns(InstrumentUnavailableWarning) as seen:
        fit(tmp_path, "s3://no-such-bucket/perf", s3.options, schedule=TWO_WINDOWS, steps=12)
    (message,) = upload_warnings(list(seen))
    assert message.startswith("perf-callbacks: uploads disabled: cannot upload to s3://no-such-bucket/perf: ")
    assert "NoSuchBucket" in message or "bucket does not exist" in message.lower()
    assert f"the files stay in {staging}" in message
    names = {p.name for p in staged(staging)}
    assert {"rank0.pt.trace.json.gz", "rank0.summary.json", "summary.txt"} <= names
    assert len([p for p in staged(staging) if p.name == "rank0.pt.trace.json.gz"]) == 2  # both windows kept


def test_an_endpoint_that_refuses_connections_warns_once(tmp_path: Path, s3: S3Server, staging: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    s3.stop()
    with pytest.warns(InstrumentUnavailableWarning) as seen:
        fit(tmp_path, "s3://perf-down/perf", {**s3.options, **FAST_FAIL})
    (message,) = upload_warnings(list(seen))
    assert "cannot upload to s3://perf-down/perf: " in message and s3.endpoint in message
    assert f"the files stay in {staging}" in message
    assert len(staged(staging)) == 6  # the window's trace, sidecar and summary, report.html and the step record
    assert "6 file(s) not uploaded to s3://perf-down/perf" in capsys.readouterr().err


def test_a_server_stopped_mid_run_keeps_what_it_did_not_get(tmp_path: Path, s3: S3Server, staging: Path) -> None:
    s3.fs().mkdir("perf-mid")

    class StopServer(L.Callback):
        def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
            if trainer.global_step == 8:  # once the first window (steps 5-6) is in the bucket, as a long step would
                assert cb.engine is not None and cb.engine.windows.uploads is not None
                # its 3 files uploaded and checked: a file listed in the bucket whose size check (after the PUT) met
                # the stopped server is rightly kept (a CI run under load stopped it between the two)
                uploads = cb.engine.windows.uploads
                _wait_for(lambda: cb.engine.windows.poll() or uploads.uploaded == 3)  # type: ignore[union-attr]
                s3.stop()

    cb = GPUPerfCallback(output_dir="s3://perf-mid/perf", storage_options={**s3.options, **FAST_FAIL},
                         schedule=TWO_WINDOWS)
    t = trainer(tmp_path, [cb, StopServer()], max_steps=12)
    with pytest.warns(InstrumentUnavailableWarning) as seen:
        t.fit(TinyModel(), loader())
    assert t.global_step == 12 and t.state.finished
    assert len(upload_warnings(list(seen))) == 1
    kept = staged(staging)
    record = {"steps-rank0.f32", "steps-rank0.json"}  # the step record, written at close
    assert {p.parent.name for p in kept if p.name != "report.html" and p.name not in record} == \
        {"window-000010-000011"}  # the second window
    assert sorted(p.name for p in kept if p.parent.name != "window-000010-000011") == \
        ["report.html", *sorted(record)]  # and the page after it


@pytest.mark.slow
def test_a_slow_server_never_makes_a_training_hook_wait(tmp_path: Path, s3: S3Server, staging: Path) -> None:
    s3.fs().mkdir("perf-slow")
    s3.delay_s = 2.0
    cb = GPUPerfCallback(output_dir="s3://perf-slow/perf", storage_options=s3.options, schedule=WINDOW)
    hook_s: dict[int, float] = {}  # training step -> time spent in our per-step hooks
    for name in ("on_train_batch_start", "on_before_backward", "on_after_backward", "on_before_optimizer_step",
                 "on_train_batch_end"):
        setattr(cb, name, _timed(getattr(cb, name), hook_s))
    pending: list[int] = []

    class AtEnd(L.Callback):
        def on_train_end(self, trainer: L.Trainer, *args: Any) -> None:  # before our teardown waits for uploads
            assert cb.engine is not None and cb.engine.windows.uploads is not None
            pending.append(4 - cb.engine.windows.uploads.uploaded)

    t = trainer(tmp_path, [cb, AtEnd()], max_steps=30)
    t0 = time.perf_counter()
    t.fit(TinyModel(), loader())
    close_s = time.perf_counter() - t0
    after_window = {step: s for step, s in hook_s.items() if step > 5}  # after the export (at 5): while it uploads
    assert pending[0] > 0  # uploads were still in flight when training ended: the steps overlapped them
    assert max(after_window.values()) < s3.delay_s / 4, after_window
    assert remote_files(s3, "perf-slow/perf") == {"report.html", "steps-rank0.f32", "steps-rank0.json",
                                                   "window-000003-000004/rank0.pt.trace.json.gz",
                                                   "window-000003-000004/rank0.summary.json",
                                                   "window-000003-000004/summary.txt"}
    assert staged(staging) == []
    print(f"max hook time per step after the window: {max(after_window.values()) * 1e3:.2f} ms; fit incl. "
          f"close: {close_s:.1f} s")


def _timed(fn: Callable[..., Any], into: dict[int, float]) -> Callable[..., Any]:
    def timed(trainer: L.Trainer, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(trainer, *args, **kwargs)
        finally:
            step = trainer.global_step
            into[step] = into.get(step, 0.0) + time.perf_counter() - t0

    return timed


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def accelerate_fit(output_dir: str, storage_options: dict[str, Any] | None = None) -> int:
    import torch
    from accelerate import Accelerator
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from perf_callbacks import AcceleratePerfHook

    acc = Accelerator(cpu=True)
    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(48, 8, generator=g), torch.randn(48, 1, generator=g)), batch_size=4)
    model = nn.Linear(8, 1)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), data)
    with AcceleratePerfHook(output_dir=output_dir, storage_options=storage_options, schedule=WINDOW,
                            log_every_n_steps=2, check_dataloaders=False, degradation_threshold=1e6).register(acc) as h:
        for x, y in h.iter(dl):
            acc.backward(nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
    return h.optimizer_steps


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_run_to_s3_writes_the_files_of_a_local_run(tmp_path: Path, s3: S3Server, staging: Path) -> None:
    s3.fs().mkdir("perf-acc")
    assert accelerate_fit(str(tmp_path / "local")) == 12
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    assert accelerate_fit("s3://perf-acc/perf", s3.options) == 12
    local = relative_files(tmp_path / "local")
    assert "tensorboard/events.out.tfevents" in local  # our own TensorBoard file, uploaded at close
    assert "window-000003-000004/rank0.pt.trace.json.gz" in local
    assert remote_files(s3, "perf-acc/perf") == local
    assert staged(staging) == []


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_transformers_run_to_s3(tmp_path: Path, s3: S3Server, staging: Path) -> None:
    pytest.importorskip("transformers")
    from perf_callbacks import TransformersPerfCallback
    from tests.integrations.hf_helpers import QUIET, make_trainer

    s3.fs().mkdir("perf-hf")
    for out, options in ((str(tmp_path / "local"), None), ("s3://perf-hf/perf", s3.options)):
        cb = TransformersPerfCallback(output_dir=out, storage_options=options, schedule=WINDOW, **QUIET)
        hf = make_trainer(tmp_path / ("hf-" + out[:2]), [cb], max_steps=8)
        hf.train()
        assert hf.state.global_step == 8
    local = relative_files(tmp_path / "local")
    assert "window-000003-000004/rank0.summary.json" in local
    assert remote_files(s3, "perf-hf/perf") == local
    assert staged(staging) == []


def test_lightning_default_output_dir_follows_a_remote_logger(tmp_path: Path, s3: S3Server, staging: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.pytorch.loggers import CSVLogger

    s3.fs().mkdir("perf-logger")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)  # the logger's and ours: from the environment
    cb = GPUPerfCallback(schedule=WINDOW)
    t = trainer(tmp_path, [cb], max_steps=8, logger=CSVLogger("s3://perf-logger/logs", name="exp"))
    t.fit(TinyModel(), loader())
    found = s3.fs().find("perf-logger/logs")
    assert any(p.startswith("perf-logger/logs/exp/version_0/perf/") and p.endswith("window-000003-000004/summary.txt")
               for p in found), found


def test_wrong_credentials_warn_once_and_keep_the_files(tmp_path: Path, s3: S3Server, staging: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import settings

    s3.fs().mkdir("perf-auth")
    monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # the server now checks keys: ours are unknown
    with pytest.warns(InstrumentUnavailableWarning) as seen:
        fit(tmp_path, "s3://perf-auth/perf", s3.options)
    (message,) = upload_warnings(list(seen))
    assert "cannot upload to s3://perf-auth/perf: PermissionError: The AWS Access Key Id you provided does not exist" \
        in message, message
    assert len(staged(staging)) == 6  # the window's trace, sidecar and summary, report.html and the step record


@pytest.mark.multiprocess
def test_two_accelerate_processes_to_s3(tmp_path: Path, s3: S3Server, staging: Path) -> None:
    import os
    import subprocess
    import sys

    s3.fs().mkdir("perf-ddp")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "tests.integrations.remote_two_ranks", str(tmp_path), s3.endpoint],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [(tmp_path / f"rank{r}.steps").read_text() for r in (0, 1)] == ["8", "8"]  # 64 samples, 2 ranks of 4
    local = relative_files(tmp_path / "local")
    assert {"window-000003-000004/rank0.pt.trace.json.gz", "window-000003-000004/rank1.pt.trace.json.gz",
            "window-000003-000004/rank0.summary.json", "window-000003-000004/rank1.summary.json",
            "window-000003-000004/summary.txt"} <= local
    board = {f for f in local if f.startswith(".perf-callbacks-ranks/")}  # the ranks' board: off for a remote output
    assert remote_files(s3, "perf-ddp/perf") == local - board
    assert len({p.split("/")[2] for p in s3.fs().find("perf-ddp/perf")}) == 1  # one run folder for both ranks
    assert (staging / "perf-callbacks-staging").is_dir() and staged(staging) == []  # both ranks staged, emptied


@pytest.mark.parametrize(("active", "window"), [(2, "window-000003-000004"), (10, "window-000003-000007")],
                         ids=["window-done", "window-open-at-exit"])
def test_an_accelerate_hook_never_closed_uploads_at_exit(tmp_path: Path, s3: S3Server, staging: Path, active: int,
                                                         window: str) -> None:
    """No ``close()`` and no ``with``: the interpreter's exit closes the hook while thread pools still take work, so
    its files reach the bucket (at ``atexit`` time: 'cannot schedule new futures after interpreter shutdown')."""
    import os
    import subprocess
    import sys

    bucket = f"perf-unclosed-{active}"
    s3.fs().mkdir(bucket)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "tests.integrations.remote_unclosed", f"s3://{bucket}/perf",
                           s3.endpoint, str(active)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "not uploaded" not in proc.stderr, proc.stderr[-3000:]
    uploaded = remote_files(s3, f"{bucket}/perf")
    assert {f"{window}/rank0.pt.trace.json.gz", f"{window}/rank0.summary.json", f"{window}/summary.txt"} <= uploaded
    assert any(name.startswith("tensorboard/") for name in uploaded)
    assert staged(staging) == []


def test_a_transformers_callback_never_closed_uploads_at_exit(tmp_path: Path, s3: S3Server, staging: Path) -> None:
    """``Trainer.train`` called past the wrapper that closes the callback, and an exception inside the window: the
    callback is flushed as the interpreter shuts down, with that exception (a partial window), while the upload
    threads still take work; the user's exception still ends the process."""
    import os
    import subprocess
    import sys

    s3.fs().mkdir("perf-unclosed-hf")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "tests.integrations.remote_unclosed_hf", "s3://perf-unclosed-hf/perf",
                           s3.endpoint, str(tmp_path / "hf")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "ValueError: user error at step 5" in proc.stderr, proc.stderr[-3000:]
    assert "not uploaded" not in proc.stderr, proc.stderr[-3000:]
    uploaded = remote_files(s3, "perf-unclosed-hf/perf")
    windows = {name.split("/")[0] for name in uploaded if name.startswith("window-")}
    assert len(windows) == 1, uploaded
    (window,) = windows
    assert {f"{window}/rank0.pt.trace.json.gz", f"{window}/rank0.summary.json"} <= uploaded
    assert staged(staging) == []


def test_what_the_run_names_is_where_its_files_are(tmp_path: Path, s3: S3Server, staging: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """``exported`` stays the local paths written; ``exported_urls`` and ``locate`` name the bucket once uploaded."""
    s3.fs().mkdir("perf-where")
    with caplog.at_level(logging.INFO, logger="perf_callbacks"):
        t = fit(tmp_path, "s3://perf-where/perf", s3.options)
    (engine,) = [c.engine for c in t.callbacks if isinstance(c, GPUPerfCallback)]  # type: ignore[attr-defined]
    (trace,) = engine.exported
    assert isinstance(trace, Path) and staging in trace.parents and not trace.exists()  # staged, removed once uploaded
    (url,) = engine.exported_urls
    run_url = f"s3://perf-where/perf/{engine.layout.run_dir.name}"
    assert url == f"{run_url}/window-000003-000004/rank0.pt.trace.json.gz" and s3.fs().exists(url)
    assert engine.locate(trace) == url and engine.locate(engine.layout.run_dir) == run_url
    (line,) = [r.getMessage() for r in caplog.records if "trace written to" in r.getMessage()]
    assert line == f"perf-callbacks: trace written to {trace} (staged; uploading to {url})"  # before it is confirmed


def test_a_file_that_was_not_uploaded_is_named_where_it_stays(tmp_path: Path, s3: S3Server, staging: Path) -> None:
    with pytest.warns(InstrumentUnavailableWarning):
        t = fit(tmp_path, "s3://no-such-bucket/perf", s3.options)
    (engine,) = [c.engine for c in t.callbacks if isinstance(c, GPUPerfCallback)]  # type: ignore[attr-defined]
    (trace,) = engine.exported
    assert trace.exists() and engine.locate(trace) == str(trace)
    assert engine.exported_urls == [f"s3://no-such-bucket/perf/{engine.layout.run_dir.name}/window-000003-000004/"
                                    "rank0.pt.trace.json.gz"]  # where it was to go


def test_a_local_run_names_its_paths(tmp_path: Path) -> None:
    t = fit(tmp_path, str(tmp_path / "local"))
    (engine,) = [c.engine for c in t.callbacks if isinstance(c, GPUPerfCallback)]  # type: ignore[attr-defined]
    (trace,) = engine.exported
    assert trace.exists() and engine.exported_urls == [] and engine.locate(trace) == str(trace)


def _windows(report: dict[str, Any], root: str) -> list[tuple[int, str, bool]]:
    """The report's windows in its order (the headline first): which run (0: the first), which window, partial."""
    named = [w["path"].replace(root, "").strip("/").split("/") for w in report["windows"]]
    runs = sorted({run for run, _ in named})
    return [(runs.index(run), window, w["partial"]) for (run, window), w in zip(named, report["windows"], strict=True)]


def test_report_of_several_windows_picks_and_orders_them_as_locally(tmp_path: Path, s3: S3Server,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs in one output_dir, three windows each, the last one partial: the same headline and order.

    The runs start in the same second, so their names sort against their order: only the files' times tell.
    """
    from perf_callbacks.integrations import lightning

    s3.fs().mkdir("perf-order")
    schedule = {"skip_first": 2, "wait": 2, "warmup": 1, "active": 2, "repeat": 3}  # 5-6, 10-11, then 15 of 15-16
    options = json.dumps({"client_kwargs": s3.options["client_kwargs"]})
    reports = []
    for n, out in enumerate((str(tmp_path / "local"), "s3://perf-order/perf")):
        names = iter(["20261201-120000-ffffff", "20261201-120000-000000"])  # the first, then the second run
        monkeypatch.setattr(lightning, "new_run_name", names.__next__)
        for run in range(2):
            time.sleep(1.1)  # object stores keep times to the second: the runs' files a second apart, at least
            fit(tmp_path / f"{n}{run}", out, None if n == 0 else s3.options, steps=16, schedule=schedule)
        capsys.readouterr()
        assert main(["report", out, "--json", *(["--storage-options", options] if n else [])]) == 0
        reports.append(_windows(json.loads(capsys.readouterr().out), out))
    here, there = reports
    assert here == [(0, "window-000010-000011", False), (0, "window-000015-000015", True),
                    (0, "window-000005-000006", False), (1, "window-000015-000015", True),
                    (1, "window-000010-000011", False), (1, "window-000005-000006", False)]  # run 0: "...-000000"
    assert there == here


def test_an_oom_folder_ends_up_in_the_bucket(tmp_path: Path, s3: S3Server, staging: Path) -> None:
    """The out-of-memory evidence, written at close after the window's upload, is uploaded by the close sweep."""
    from perf_callbacks.core.memory.sampler import OutOfMemoryError
    from tests.integrations.oom_helpers import OOMModel

    s3.fs().mkdir("perf-oom")
    cb = GPUPerfCallback(output_dir="s3://perf-oom/perf", storage_options=s3.options, schedule=WINDOW,
                         check_dataloaders=False)
    t = trainer(tmp_path, [cb], max_steps=8)
    model = OOMModel("forward", at=6)  # after the window of steps 3-4
    with pytest.raises(OutOfMemoryError) as info:
        t.fit(model, loader())
    assert info.value is model.error
    assert remote_files(s3, "perf-oom/perf") == {"oom-rank0/summary.txt", "report.html", "steps-rank0.f32",
                                                  "steps-rank0.json",
                                                  "window-000003-000004/rank0.pt.trace.json.gz",
                                                  "window-000003-000004/rank0.summary.json",
                                                  "window-000003-000004/summary.txt"}
    (summary,) = [p for p in s3.fs().find("perf-oom/perf") if p.endswith("oom-rank0/summary.txt")]
    assert s3.fs().cat_file(summary).startswith(b"out of memory on rank 0 at step 6, phase forward\n")
    assert staged(staging) == []  # nothing left behind on local disk


def test_a_windows_allocator_snapshot_ends_up_in_the_bucket(tmp_path: Path, s3: S3Server, staging: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``rank{R}.snapshot.pickle`` beside the window's trace (CUDA's allocator history, stood in for on CPU)."""
    import pickle

    import torch

    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda device=None: {"segments": [], "device_traces": [[]]})
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda *args, **kwargs: None)

    class Recording(L.Callback):  # as OOMForensics.start_history leaves it on a CUDA device with memory_history
        def on_train_start(self, trainer: L.Trainer, *args: Any) -> None:
            assert cb.engine is not None
            cb.engine.mem.oom.recording = True

    s3.fs().mkdir("perf-snap")
    cb = GPUPerfCallback(output_dir="s3://perf-snap/perf", storage_options=s3.options, schedule=WINDOW)
    t = trainer(tmp_path, [cb, Recording()], max_steps=8)
    t.fit(TinyModel(), loader())
    assert "window-000003-000004/rank0.snapshot.pickle" in remote_files(s3, "perf-snap/perf")
    (snapshot,) = [p for p in s3.fs().find("perf-snap/perf") if p.endswith("rank0.snapshot.pickle")]
    assert pickle.loads(s3.fs().cat_file(snapshot)) == {"segments": [], "device_traces": [[]]}
    assert staged(staging) == []

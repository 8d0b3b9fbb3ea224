"""The TensorBoard tags a real short CPU run writes, in each adapter: the documented contract (docs/reference/tensorboard-tags.md).

Interval figures are ``perf/train/...``, ``perf/memory/...``, ``perf/overhead/...`` and ``perf/ledger/...`` at logging
steps; the figures of a profiling window are ``perf/window/...`` at the step after it; a single process logs no
communication figure; a run shorter than one logging interval logs its interval figures once, at its last step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

WINDOW = {"skip_first": 2, "wait": 0, "warmup": 1, "active": 2}  # steps 3-4: the window's scalars land at step 5
INTERVAL = {"perf/train/step_time_ms", "perf/train/data_wait_fraction", "perf/train/samples_per_sec",
            "perf/train/tflops", "perf/memory/host_rss_mb", "perf/memory/peak_rss_mb", "perf/overhead/log_ms",
            "perf/overhead/window_ms", "perf/ledger/productive", "perf/ledger/data_wait", "perf/ledger/own",
            "perf/ledger/other"}
WINDOW_TAGS = {"perf/window/step_time_ms", "perf/window/data_wait_fraction", "perf/window/achieved_tflops",
               "perf/window/cpu_contention_fraction",  # Linux: the window's load is recorded, and with it the wait's parts
               "perf/window/data_wait_on_cpu_fraction", "perf/window/data_wait_blocked_fraction",
               "perf/window/data_wait_cpu_contention_fraction"}
LATER = {"perf/train/cpu_contention_fraction"}  # Linux: from the second interval on (the first has no start mark)
HELD = {"perf/memory/held_mb"}  # read at the start of each logged step: none in a run shorter than one interval


def tags(logdir: Path) -> tuple[dict[str, list[int]], list[str]]:
    """``({scalar tag: [steps]}, [text tags])`` of every event file under ``logdir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, list[int]] = {}
    texts: list[str] = []
    for folder in sorted({p.parent for p in logdir.rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(folder), size_guidance={"tensors": 0, "scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend(e.step for e in acc.Scalars(tag))
        texts += acc.Tags()["tensors"]
    return scalars, sorted(texts)


def lightning_run(tmp_path: Path, max_steps: int, every: int) -> tuple[dict[str, list[int]], list[str]]:
    from lightning.pytorch.loggers import TensorBoardLogger

    from perf_callbacks import GPUPerfCallback
    from tests.integrations.lit_helpers import TinyModel, loader, trainer

    logger = TensorBoardLogger(str(tmp_path), name="tb")
    cb = GPUPerfCallback(schedule=WINDOW, check_dataloaders=False, degradation_threshold=100.0, log_min_interval_s=0)
    trainer(tmp_path, [cb], logger=logger, log_every_n_steps=every, max_steps=max_steps).fit(TinyModel(), loader())
    return tags(Path(logger.log_dir))


def test_lightning_writes_exactly_the_documented_tags(tmp_path: Path) -> None:
    scalars, texts = lightning_run(tmp_path, max_steps=12, every=4)
    assert scalars == {
        **dict.fromkeys(sorted(INTERVAL | HELD), [4, 8, 12]), **dict.fromkeys(sorted(WINDOW_TAGS), [5]),
        **dict.fromkeys(sorted(LATER), [8, 12])}
    assert texts == ["perf/window/summary/text_summary"]


def test_a_lightning_run_shorter_than_one_interval_logs_its_interval_once_at_the_end(tmp_path: Path) -> None:
    scalars, texts = lightning_run(tmp_path, max_steps=6, every=50)
    assert scalars == {**dict.fromkeys(sorted(INTERVAL), [6]), **dict.fromkeys(sorted(WINDOW_TAGS), [5])}
    assert texts == ["perf/window/summary/text_summary"]


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_an_accelerate_run_shorter_than_one_interval_logs_its_interval_once_at_close(tmp_path: Path) -> None:
    from tests.integrations.acc_helpers import setup, train

    acc, hook, parts = setup(tmp_path, schedule=WINDOW, log_every_n_steps=50)  # 16 steps
    with hook:
        train(acc, hook, parts)
    scalars, texts = tags(hook.engine.layout.run_dir / "tensorboard")
    assert scalars == {**dict.fromkeys(sorted(INTERVAL), [16]), **dict.fromkeys(sorted(WINDOW_TAGS), [5])}
    assert texts == ["perf/window/summary/text_summary"]


def test_a_transformers_run_shorter_than_one_interval_logs_its_interval_once_at_the_end(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from tests.integrations.hf_helpers import QUIET, callback, make_trainer

    options: dict[str, Any] = {"schedule": WINDOW, "log_every_n_steps": 50, **QUIET}
    cb = callback(tmp_path / "perf", **options)
    trainer = make_trainer(tmp_path, [cb], max_steps=6)
    trainer.train()
    logging_dir = getattr(trainer.args, "logging_dir", None)  # 4.x; 5.x: our own events in the run folder
    scalars, texts = tags(Path(logging_dir) if logging_dir else cb.engine.layout.run_dir / "tensorboard")
    assert scalars == {**dict.fromkeys(sorted(INTERVAL), [6]), **dict.fromkeys(sorted(WINDOW_TAGS), [5])}
    assert texts == ["perf/window/summary/text_summary"]


def test_a_short_transformers_run_reaches_report_to_tensorboard_after_its_writer_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorBoardCallback closes its writer at on_train_end, before ours runs: the interval logged then still lands
    (a writer is opened again for it), under our own tags, as under Lightning and Accelerate."""
    pytest.importorskip("transformers")
    from transformers import TrainingArguments

    from tests.integrations.hf_helpers import QUIET, callback, make_trainer

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))  # 5.x; 4.x takes logging_dir
    four = {"logging_dir": str(tmp_path / "tb")} if "logging_dir" in TrainingArguments.__dataclass_fields__ else {}
    cb = callback(tmp_path / "perf", **{"schedule": WINDOW, "log_every_n_steps": 50, **QUIET})
    make_trainer(tmp_path, [cb], max_steps=6, report_to="tensorboard", logging_steps=50, **four).train()
    scalars, texts = tags(tmp_path / "tb")
    ours = {tag: steps for tag, steps in scalars.items() if "perf/" in tag}
    assert ours == {**{t: [6] for t in INTERVAL}, **{t: [5] for t in WINDOW_TAGS}}  # the same tags as elsewhere
    assert [t for t in texts if "perf" in t] == ["perf/window/summary/text_summary"]  # and the Trainer's own args

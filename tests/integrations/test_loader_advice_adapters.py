"""The loader advice from the workers' own evidence, through Accelerate and ``transformers.Trainer`` as through Lightning.

``test_loader_advice.py`` shows it with Lightning: workers asleep on "storage" at ``num_workers`` = the cores are told
to raise ``num_workers`` beyond the cores, not that "more workers cannot help". The same loader here, driven by an
Accelerate loop through ``hook.iter`` and by a ``transformers.Trainer`` (whose advice names ``dataloader_num_workers``):
the live warning, the window's loader block and its summary say the workers waited, and the number suggested is above
the cores.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, Dataset

from perf_callbacks import AcceleratePerfHook, TransformersPerfCallback
from perf_callbacks.analysis import AnalysisResult, analyze
from perf_callbacks.exceptions import DataLoaderWarning
from tests.integrations.loader_helpers import QUIET_BUT_LOADER, WINDOW, Fetching, cores

pytestmark = [pytest.mark.usefixtures("fresh_accelerate_state"),  # conftest.py
              pytest.mark.filterwarnings("ignore:This DataLoader will create")]  # torch's, for workers above cores
SAMPLE_MS = 75.0  # as test_loader_advice.py: x 4 samples a batch, 300 ms a batch per worker
STEP_MS = 15.0
STEPS = 25


def suggested(text: str, name: str) -> int:
    found = re.search(rf"raise {name} to (\d+)", text)
    assert found is not None, text
    return int(found.group(1))


def window_of(out: Path) -> AnalysisResult:
    (window,) = sorted(out.glob("*/window-*"))
    return analyze(window)


def accelerate_run(out: Path, workers: int) -> AnalysisResult:
    acc = Accelerator(cpu=True)
    model = nn.Linear(16, 4)
    loader = DataLoader(Fetching(SAMPLE_MS), batch_size=4, num_workers=workers, persistent_workers=True)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01), loader)
    hook = AcceleratePerfHook(output_dir=str(out), schedule=WINDOW, **QUIET_BUT_LOADER)
    with hook.register(acc):
        for step, (x, y) in enumerate(hook.iter(dl)):
            time.sleep(STEP_MS / 1e3)  # the host waits for its device
            acc.backward(nn.functional.cross_entropy(model(x), y))
            opt.step()
            opt.zero_grad()
            if step + 1 == STEPS:
                break
    return window_of(out)


class Samples(Dataset[dict[str, torch.Tensor]]):
    """:class:`Fetching`'s samples as the dicts a Trainer hands its model."""

    def __init__(self) -> None:
        self.inner = Fetching(SAMPLE_MS)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x, y = self.inner[i]
        return {"x": x, "labels": y}


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        time.sleep(STEP_MS / 1e3)
        out = self.layer(x)
        return {"loss": nn.functional.cross_entropy(out, labels), "logits": out}


def transformers_run(out: Path, workers: int) -> AnalysisResult:
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(str(out.parent / "hf"), max_steps=STEPS, per_device_train_batch_size=4, use_cpu=True,
                             report_to="none", logging_steps=10, save_strategy="no", disable_tqdm=True,
                             dataloader_num_workers=workers, dataloader_persistent_workers=True)
    callback = TransformersPerfCallback(output_dir=str(out), schedule=WINDOW, **QUIET_BUT_LOADER)
    Trainer(Classifier(), args, train_dataset=Samples(), callbacks=[callback]).train()
    return window_of(out)


@pytest.mark.slow
@pytest.mark.parametrize(("run", "name"), [(accelerate_run, "num_workers"),
                                           (transformers_run, "dataloader_num_workers")],
                         ids=["accelerate", "transformers"])
def test_workers_that_wait_are_told_to_add_workers_beyond_the_cores(tmp_path: Path, run: Any, name: str) -> None:
    with cores(2) as pinned:
        n = len(pinned)
        with pytest.warns(DataLoaderWarning, match=f"raise {name} to") as said:
            result = run(tmp_path / "perf", n)
    (warned,) = [str(w.message) for w in said if w.category is DataLoaderWarning]
    assert suggested(warned, name) > n and "were blocked (storage, network, sleep)" in warned, warned
    assert "cannot help" not in warned, warned
    assert result.loader is not None and result.loader["advice_kind"] == "io_wait", result.loader
    assert result.loader["num_workers"] == n and result.loader["workers_cpu_fraction"] < 0.5, result.loader
    advice = next(r for r in result.recommendations if "raise num_workers to" in r)  # the report: torch's names
    assert suggested(advice, "num_workers") > n and "cannot help" not in advice, advice
    (summary,) = (tmp_path / "perf").glob("*/window-*/summary.txt")  # the summary: the framework's own names
    text = summary.read_text()
    assert suggested(text, name) > n and "cannot help" not in text, text

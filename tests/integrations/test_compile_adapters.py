"""torch.compile health through the adapters: a real compiled model (``backend="eager"``) in a real training loop.

Timing is not asserted here (``tests/core/flops/test_compile_watch.py`` does, on fed step times): these runs check that each
adapter's model really compiles, that its compile time reaches the logger, and that a storm or a graph break is said
once, with what torch recorded.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch._dynamo
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks import GPUPerfCallback
from perf_callbacks.exceptions import CompileWarning, PerfWarning
from tests.integrations.lit_helpers import Recorder, trainer

QUIET = {"data_wait_steps": 100_000, "check_dataloaders": False, "schedule": {"skip_first": 100_000},
         "log_min_interval_s": 0}  # every interval: the figures are counted at each logging step


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Net(L.LightningModule):
    """A model whose ``training_step`` calls ``self(x)``, the forward Lightning compiles; ``branch``: a graph break."""

    def __init__(self, branch: bool = False) -> None:
        super().__init__()
        self.layer, self.branch = nn.Linear(16, 4), branch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layer(x)
        if self.branch and y.sum() > 0:  # data-dependent
            y = y * 2
        return y

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def growing_batches(steps: int, every: int) -> DataLoader:
    """Batch ``i`` has ``8 + i // every`` rows: a new size every ``every`` steps."""
    sizes = [8 + i // every for i in range(steps)]
    data = TensorDataset(torch.randn(sum(sizes), 16), torch.randint(0, 4, (sum(sizes),)))
    starts = [sum(sizes[:i]) for i in range(steps)]
    return DataLoader(data, batch_sampler=[list(range(s, s + n)) for s, n in zip(starts, sizes, strict=True)])


def fit(tmp_path: Path, model: nn.Module, data: DataLoader, steps: int) -> tuple[Recorder, list[str]]:
    rec = Recorder()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer(tmp_path, [GPUPerfCallback(**QUIET)], logger=rec, log_every_n_steps=5, max_steps=steps,
                max_epochs=1).fit(model, data)
    return rec, [f"{w.category.__name__}: {w.message}" for w in seen if issubclass(w.category, PerfWarning)]


def test_lightning_a_model_compiled_once_logs_its_compile_time_at_the_start(tmp_path: Path) -> None:
    rec, said = fit(tmp_path, torch.compile(Net(), backend="eager"), growing_batches(20, every=1000), 20)
    assert said == []
    seconds = rec.series("perf/compile/seconds")
    assert len(seconds) == 4 and seconds[0] > 0 and seconds[1:] == [0.0, 0.0, 0.0]
    assert rec.series("perf/compile/recompiles") == [0.0] * 4


@pytest.mark.parametrize("dynamic", [False, None])
def test_lightning_epochs_with_a_last_short_batch_and_validation_are_no_storm(tmp_path: Path, dynamic: bool | None) -> None:
    """4 epochs of 13 batches (the last of 4 rows) with validation after each (8, 8 and 4 rows, in eval mode): torch
    recompiles training_step and forward for the short batch at step 12 (2 recompilations), then never: no storm."""
    class WithVal(Net):
        def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
            self(batch[0])

    g = torch.Generator().manual_seed(0)
    train = DataLoader(TensorDataset(torch.randn(100, 16, generator=g), torch.randint(0, 4, (100,), generator=g)),
                       batch_size=8)
    val = DataLoader(TensorDataset(torch.randn(20, 16, generator=g), torch.randint(0, 4, (20,), generator=g)),
                     batch_size=8)
    rec = Recorder()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        trainer(tmp_path, [GPUPerfCallback(**QUIET)], logger=rec, log_every_n_steps=5, max_epochs=4, max_steps=-1,
                limit_val_batches=None).fit(torch.compile(WithVal(), backend="eager", dynamic=dynamic), train, val)
    assert [str(w.message) for w in seen if issubclass(w.category, PerfWarning)] == []
    assert sum(rec.series("perf/compile/recompiles")) == 2


def test_lightning_a_batch_size_changing_every_5_steps_is_one_storm_warning(tmp_path: Path) -> None:
    rec, said = fit(tmp_path, torch.compile(Net(), backend="eager", dynamic=False), growing_batches(40, every=5), 40)
    assert len(said) == 1 and said[0].startswith("CompileWarning: perf-callbacks: torch.compile recompiled at 5 of"), said
    assert "size mismatch at index 0. expected 12, actual 13" in said[0] and "mark_dynamic" in said[0]
    assert sum(rec.series("perf/compile/recompiles")) == 7


def test_lightning_a_data_dependent_if_is_one_graph_break_report(tmp_path: Path) -> None:
    rec, said = fit(tmp_path, torch.compile(Net(branch=True), backend="eager"), growing_batches(10, every=1000), 10)
    # Lightning's training_step is compiled too: it inlines forward and breaks there, then forward breaks on its own
    assert len(said) == 1 and said[0].startswith("CompileWarning: perf-callbacks: torch.compile: 2 graph breaks in "
                                                 "the compilation at step 0, at 1 place in the code"), said
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "y.sum() > 0:" in text)
    assert f"test_compile_adapters.py:{line} `if self.branch and y.sum() > 0:" in said[0] and "(2x)" in said[0]
    assert rec.series("perf/compile/graph_breaks") == [2.0, 0.0]
    assert not issubclass(CompileWarning, UserWarning)  # a RuntimeWarning, as the slowdown warning


class Plain(nn.Module):
    """An ``nn.Module`` for Accelerate and transformers; ``branch``: a data-dependent ``if``, a graph break."""

    def __init__(self, inputs: int = 16, outputs: int = 4, branch: bool = False) -> None:
        super().__init__()
        self.layer, self.branch = nn.Linear(inputs, outputs), branch

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None, **_: Any) -> Any:  # num_items_in_batch
        out = self.layer(x)
        if self.branch and out.mean() > 0:  # data-dependent
            out = out * 2
        return out if labels is None else {"loss": nn.functional.mse_loss(out, labels), "logits": out}


def break_at(code: str) -> str:
    """How a graph break report names the line of this file that starts with ``code``: ``file:line `the line```."""
    line, text = next((i, text.strip()) for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                      if text.strip().startswith(code))
    return f"data-dependent control flow (a Python if/while on a tensor's value) at test_compile_adapters.py:{line} `{text}`"


BRANCH = break_at("if self.branch and out.mean() > 0:")


def accelerate_fit(tmp_path: Path, model: nn.Module, data: DataLoader) -> tuple[list[dict[str, float]], list[str]]:
    """Train ``model`` (compiled) through Accelerate with the hook; ``(the logged figures, the PerfWarnings said)``."""
    from accelerate import Accelerator

    from perf_callbacks import AcceleratePerfHook

    acc = Accelerator(cpu=True)
    model, opt, dl = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), data)
    logged: list[tuple[int, dict[str, float]]] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with AcceleratePerfHook(output_dir=str(tmp_path), log_every_n_steps=5, **QUIET).register(acc) as hook:
            assert hook.engine is not None
            hook.engine.ctx.log_metrics = lambda m, s: logged.append((s, m))  # instead of TensorBoard files
            for x, y in hook.iter(dl):
                acc.backward(nn.functional.cross_entropy(model(x), y))
                opt.step()
                opt.zero_grad()
    return [m for _, m in sorted(logged, key=lambda sm: sm[0])], [
        f"{w.category.__name__}: {w.message}" for w in seen if issubclass(w.category, PerfWarning)]


@pytest.mark.usefixtures("fresh_accelerate_state")  # conftest.py
def test_accelerate_a_model_compiled_once_logs_its_compile_time_at_the_start(tmp_path: Path) -> None:
    logged, said = accelerate_fit(tmp_path, torch.compile(nn.Linear(16, 4), backend="eager"),
                                  growing_batches(20, every=1000))
    assert said == []
    seconds = [m["perf/compile/seconds"] for m in logged]
    assert len(seconds) == 4 and seconds[0] > 0 and seconds[1:] == [0.0, 0.0, 0.0]
    assert [m["perf/compile/recompiles"] for m in logged] == [0.0] * 4


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_a_model_compiled_once_logs_its_compile_time_and_a_storm_once(tmp_path: Path) -> None:
    logged, said = accelerate_fit(tmp_path, torch.compile(nn.Linear(16, 4), backend="eager", dynamic=False),
                                  growing_batches(40, every=5))
    assert len(said) == 1 and said[0].startswith("CompileWarning: perf-callbacks: torch.compile recompiled at 5 of "
                                                 "the last 50 steps"), said
    assert "size mismatch at index 0. expected 12, actual 13" in said[0] and "mark_dynamic" in said[0]
    seconds = [m["perf/compile/seconds"] for m in logged]
    assert seconds[0] > 0 and sum(m["perf/compile/recompiles"] for m in logged) == 7


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_accelerate_a_data_dependent_if_is_one_graph_break_report(tmp_path: Path) -> None:
    logged, said = accelerate_fit(tmp_path, torch.compile(Plain(branch=True), backend="eager"),
                                  growing_batches(10, every=1000))
    assert len(said) == 1 and said[0].startswith("CompileWarning: perf-callbacks: torch.compile: 1 graph break in "
                                                 "the compilation at step 0, at 1 place in the code"), said
    assert f"{BRANCH} (1x)" in said[0]
    assert [m["perf/compile/graph_breaks"] for m in logged] == [1.0, 0.0]


def scalars(logdir: Path, prefix: str) -> dict[str, list[float]]:
    """``{tag: [values by step]}`` of the TensorBoard scalars under ``logdir`` whose tag starts with ``prefix``.

    For transformers, ``logdir`` is the Trainer's whole output folder: our events go to ``args.logging_dir`` where
    the Trainer has one (4.x), else to the run folder.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[float]] = {}
    for folder in sorted({p.parent for p in logdir.rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            if tag.startswith(prefix):
                out.setdefault(tag, []).extend(e.value for e in sorted(acc.Scalars(tag), key=lambda e: e.step))
    return out


@pytest.mark.usefixtures("fresh_accelerate_state")  # the Trainer's Accelerator keeps torch_compile's backend else
def test_transformers_torch_compile_logs_its_compile_time_at_the_start(tmp_path: Path) -> None:
    """``TrainingArguments(torch_compile=True)`` compiles the model after the callback sees it: it compiles still."""
    from perf_callbacks import TransformersPerfCallback
    from tests.integrations.hf_helpers import make_trainer

    cb = TransformersPerfCallback(log_every_n_steps=5, **QUIET)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        make_trainer(tmp_path, [cb], max_steps=15, torch_compile=True, torch_compile_backend="eager").train()
    assert [str(w.message) for w in seen if issubclass(w.category, PerfWarning)] == []
    assert cb.engine is not None
    figures = scalars(tmp_path, "perf/compile/")
    seconds = figures["perf/compile/seconds"]
    assert len(seconds) == 3 and seconds[0] > 0 and seconds[1:] == [0.0, 0.0]
    assert figures["perf/compile/recompiles"] == [0.0] * 3


class Shrinking:
    """A data collator that keeps ``8 + i // every`` rows of its ``i``-th batch: a new batch size every ``every``."""

    def __init__(self, every: int) -> None:
        self.every, self.calls = every, 0

    def __call__(self, features: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        from transformers import default_data_collator

        rows, self.calls = 8 + self.calls // self.every, self.calls + 1
        assert len(features) >= rows
        return dict(default_data_collator(features[:rows]))


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_transformers_a_batch_size_changing_every_5_steps_is_one_storm_warning(tmp_path: Path) -> None:
    """A model compiled by the user (``dynamic=False``: the Trainer's own ``torch_compile`` leaves ``dynamic`` to
    torch, which makes the size dynamic at its first change) and a batch size growing every 5 steps. The compiled
    module's signature is ``(*args, **kwargs)``: the Trainer would drop every column without remove_unused_columns."""
    from perf_callbacks import TransformersPerfCallback
    from tests.integrations.hf_helpers import make_trainer

    cb = TransformersPerfCallback(log_every_n_steps=5, **QUIET)
    model = torch.compile(Plain(8, 1), backend="eager", dynamic=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        make_trainer(tmp_path, [cb], max_steps=40, n=640, model=model, collator=Shrinking(every=5),
                     per_device_train_batch_size=16, remove_unused_columns=False).train()
    said = [f"{w.category.__name__}: {w.message}" for w in seen if issubclass(w.category, PerfWarning)]
    assert len(said) == 1 and said[0].startswith("CompileWarning: perf-callbacks: torch.compile recompiled at 5 of"), said
    assert "size mismatch at index 0. expected 12, actual 13" in said[0] and "mark_dynamic" in said[0]
    assert cb.engine is not None
    figures = scalars(tmp_path, "perf/compile/")
    assert figures["perf/compile/seconds"][0] > 0 and sum(figures["perf/compile/recompiles"]) == 7


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_transformers_a_data_dependent_if_is_one_graph_break_report(tmp_path: Path) -> None:
    from perf_callbacks import TransformersPerfCallback
    from tests.integrations.hf_helpers import make_trainer

    cb = TransformersPerfCallback(log_every_n_steps=5, **QUIET)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        make_trainer(tmp_path, [cb], max_steps=10, model=Plain(8, 1, branch=True), torch_compile=True,
                     torch_compile_backend="eager").train()
    said = [f"{w.category.__name__}: {w.message}" for w in seen if issubclass(w.category, PerfWarning)]
    assert len(said) == 1 and said[0].startswith("CompileWarning: perf-callbacks: torch.compile: 1 graph break in "
                                                 "the compilation at step 0, at 1 place in the code"), said
    assert f"{BRANCH} (1x)" in said[0]
    assert cb.engine is not None
    assert scalars(tmp_path, "perf/compile/")["perf/compile/graph_breaks"] == [1.0, 0.0]


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_transformers_torch_compile_makes_a_changing_batch_size_dynamic_and_is_no_storm(tmp_path: Path) -> None:
    """``TrainingArguments(torch_compile=True)`` leaves ``dynamic`` to torch: it recompiles once, at the first new size
    (step 5), with the size dynamic, and never again: nothing to warn about."""
    from perf_callbacks import TransformersPerfCallback
    from tests.integrations.hf_helpers import make_trainer

    cb = TransformersPerfCallback(log_every_n_steps=5, **QUIET)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        make_trainer(tmp_path, [cb], max_steps=40, n=640, model=Plain(8, 1), collator=Shrinking(every=5),
                     per_device_train_batch_size=16, torch_compile=True, torch_compile_backend="eager").train()
    assert [str(w.message) for w in seen if issubclass(w.category, PerfWarning)] == []
    assert cb.engine is not None
    assert scalars(tmp_path, "perf/compile/")["perf/compile/recompiles"] == [0.0, 1.0] + [0.0] * 6

"""Training with each adapter's defaults (FLOPs counted on step 0) gives the same weights, bit for bit, as without it.

Each test trains the same seeded model on the same data twice in one process, once without the adapter and once
with its defaults, and compares every parameter with ``torch.equal`` and the RNG state at the end (the adapter
draws no random numbers: the dropout masks of both runs are the same). The models hold one activation, norm or
attention each, with dropout; a tiny ``LlamaForCausalLM`` (SwiGLU MLP, SDPA attention) is built from a config.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks import AcceleratePerfHook, GPUPerfCallback, TransformersPerfCallback
from perf_callbacks.core.engine.engine import PerfEngine

STEPS = 4  # the defaults count FLOPs on step 0, and start no profiler before step 11 (its warm-up)


class Attention(nn.Module):
    """Causal self-attention over 4 tokens of 8 features, 2 heads, through ``scaled_dot_product_attention``."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        q = h.view(h.shape[0], 4, 2, 4).transpose(1, 2)
        p = 0.1 if self.training else 0.0
        out = nn.functional.scaled_dot_product_attention(q, q.flip(-1), q, dropout_p=p, is_causal=True)
        return out.transpose(1, 2).reshape(h.shape)


PARTS: dict[str, Callable[[], nn.Module]] = {
    "silu": nn.SiLU, "mish": nn.Mish, "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "layernorm": lambda: nn.LayerNorm(32), "sdpa": Attention,
}


def body(part: str, features: int = 16, out: int = 4) -> nn.Module:
    return nn.Sequential(nn.Linear(features, 32), PARTS[part](), nn.Dropout(0.1), nn.Linear(32, out))


def same_training(a: nn.Module, b: nn.Module) -> None:
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(p, q), f"{name} differs by up to {(p - q).abs().max().item():.3g}"


def twice(run: Callable[[bool], nn.Module]) -> None:
    """``run(with_adapter)`` from the same seed, without then with the adapter: same weights, same RNG state."""
    torch.manual_seed(0)
    baseline = run(False)
    rng = torch.get_rng_state()
    torch.manual_seed(0)
    instrumented = run(True)
    same_training(baseline, instrumented)
    assert torch.equal(rng, torch.get_rng_state())


def assert_counted(engine: PerfEngine | None) -> None:
    """The run with the adapter counted its FLOPs on step 0 (the comparison would be moot without)."""
    assert engine is not None and engine.flops.counted_step == 0 and engine.flops.per_step
    assert engine.flops.source == "counted with FlopCounterMode on step 0"


# ---- Lightning --------------------------------------------------------------------------------------------------
class Net(L.LightningModule):
    def __init__(self, part: str) -> None:
        super().__init__()
        self.net = body(part)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def samples(n: int = 32, features: int = 16) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(n, features, generator=g), torch.randint(0, 4, (n,), generator=g))


@pytest.mark.parametrize("part", PARTS)
def test_lightning_defaults_train_bit_identically(tmp_path: Path, part: str) -> None:
    from tests.integrations.lit_helpers import trainer

    def run(instrumented: bool) -> nn.Module:
        model = Net(part)
        callbacks = [GPUPerfCallback()] if instrumented else []
        fit = trainer(tmp_path / str(instrumented), callbacks, max_steps=STEPS, limit_val_batches=0)
        fit.fit(model, DataLoader(samples(), batch_size=8))
        if instrumented:
            assert_counted(callbacks[0].engine)
        return model

    twice(run)


def test_lightning_defaults_train_bit_identically_through_a_profiling_window(tmp_path: Path) -> None:
    """Past the default schedule's first window (steps 12-14, its summary analysed in another process)."""
    from tests.integrations.lit_helpers import trainer

    def run(instrumented: bool) -> nn.Module:
        model = Net("silu")
        callbacks = [GPUPerfCallback()] if instrumented else []
        fit = trainer(tmp_path / str(instrumented), callbacks, max_steps=16, limit_val_batches=0)
        fit.fit(model, DataLoader(samples(n=128), batch_size=8))
        if instrumented:
            assert_counted(callbacks[0].engine)
            assert callbacks[0].engine is not None and len(callbacks[0].engine.exported) == 1
        return model

    twice(run)


# ---- Accelerate -------------------------------------------------------------------------------------------------
@pytest.fixture
def fresh_accelerators() -> Iterator[Callable[[], Accelerator]]:
    """Accelerators on the CPU, each from fresh process-wide state (Accelerate keeps singletons)."""

    def reset() -> None:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()

    def make() -> Accelerator:
        reset()
        return Accelerator(cpu=True)

    yield make
    reset()


@pytest.mark.parametrize("part", PARTS)
def test_accelerate_defaults_train_bit_identically(tmp_path: Path, part: str,
                                                    fresh_accelerators: Callable[[], Accelerator]) -> None:
    def run(instrumented: bool) -> nn.Module:
        acc = fresh_accelerators()
        model = body(part)
        model, opt, dl = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=0.01),
                                     DataLoader(samples(), batch_size=8))
        hook = AcceleratePerfHook(output_dir=str(tmp_path / "perf")).register(acc) if instrumented else None
        for x, y in hook.iter(dl) if hook is not None else dl:
            acc.backward(nn.functional.cross_entropy(model(x), y))
            opt.step()
            opt.zero_grad()
        if hook is not None:
            hook.close()
            assert_counted(hook.engine)
        unwrapped: nn.Module = acc.unwrap_model(model)
        return unwrapped

    twice(run)


# ---- transformers -----------------------------------------------------------------------------------------------
class Regressor(nn.Module):
    def __init__(self, part: str) -> None:
        super().__init__()
        self.net = body(part, features=8, out=1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.net(x)
        return {"loss": nn.functional.mse_loss(out, labels), "logits": out}


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int = 32, length: int = 8) -> None:
        self.ids = torch.randint(0, 64, (n, length), generator=torch.Generator().manual_seed(1))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                         attention_dropout=0.1)
    return LlamaForCausalLM(config)


def hf_run(tmp_path: Path, make_model: Callable[[], nn.Module], dataset: Any = None) -> Callable[[bool], nn.Module]:
    from tests.integrations.hf_helpers import make_trainer

    def run(instrumented: bool) -> nn.Module:
        callbacks = [TransformersPerfCallback()] if instrumented else []
        hf = make_trainer(tmp_path / str(instrumented), callbacks, max_steps=STEPS, model=make_model(),
                          logging_steps=1000, optim="adamw_torch", learning_rate=0.01)
        if dataset is not None:
            hf.train_dataset = dataset
        hf.train()
        if instrumented:
            assert_counted(callbacks[0].engine)
        assert hf.state.global_step == STEPS and isinstance(hf.model, nn.Module)
        return hf.model

    return run


@pytest.mark.parametrize("part", PARTS)
def test_transformers_defaults_train_bit_identically(tmp_path: Path, part: str) -> None:
    twice(hf_run(tmp_path, lambda: Regressor(part)))


def test_transformers_defaults_train_a_llama_with_swiglu_bit_identically(tmp_path: Path) -> None:
    twice(hf_run(tmp_path, tiny_llama, Tokens()))

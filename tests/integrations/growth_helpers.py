"""A plain Accelerate loop that keeps a loss every step (with its graph, or detached), and what those losses hold.

The kept loss is one the loop never backwards (the loss after the optimizer step, kept to log it): ``backward()``
frees the saved tensors of the graph it runs through, so a loss kept after its own backward holds only itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from perf_callbacks import AcceleratePerfHook, MemoryGrowthWarning

ROOT = Path(__file__).resolve().parents[2]
BATCH, IN, OUT = 512, 64, 1024  # the loss's kept tensors: out - y (2 MiB, aten::sub) and the batch (128 KiB)
STEPS = 234
WINDOW = {"skip_first": 228, "wait": 0, "warmup": 1, "active": 3}  # steps 229-231, after the growth is told


def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    d = out - y  # saved (twice) by the mul's backward: kept while the loss keeps its graph
    return (d * d).mean()


def leak_run(tmp: Path, detach: bool, **options: Any) -> tuple[AcceleratePerfHook, list[torch.Tensor], list[Any]]:
    """``STEPS`` steps that append each loss to a list; returns the hook, the losses and the growth warnings."""
    acc = Accelerator(cpu=True)
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(BATCH * STEPS, IN, generator=g), torch.randn(BATCH * STEPS, 1, generator=g))
    model = nn.Linear(IN, OUT)
    model, opt, dl = acc.prepare(model, torch.optim.Adam(model.parameters(), lr=1e-3),
                                 DataLoader(ds, batch_size=BATCH, num_workers=0))
    options = {"output_dir": str(tmp / "perf"), "schedule": WINDOW, "log_every_n_steps": 2,
               "degradation_threshold": 1e6, "profile_memory": True, "log_min_interval_s": 0, **options}
    hook = AcceleratePerfHook(**options).register(acc)
    losses: list[torch.Tensor] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with hook:
            for x, y in hook.iter(dl):
                acc.backward(loss_fn(model(x), y))
                opt.step()
                opt.zero_grad(set_to_none=True)
                after = loss_fn(model(x), y)  # the loss after the step, to log it: with grad on, so with its graph
                losses.append(after.detach() if detach else after)
    hook.params = list(model.parameters())  # type: ignore[attr-defined]  # for kept_bytes
    return hook, losses, [w for w in seen if issubclass(w.category, MemoryGrowthWarning)]


def kept_bytes(losses: list[torch.Tensor], model_params: list[torch.Tensor]) -> int:
    """The bytes the losses' graphs keep alive: every saved tensor's storage, once, less the parameters'."""
    params = {p.untyped_storage().data_ptr() for p in model_params}
    storages: dict[int, int] = {}
    for loss in losses:
        stack, seen = [loss.grad_fn], set()
        while stack:
            fn = stack.pop()
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            for name in dir(fn):
                value = getattr(fn, name, None) if name.startswith("_saved_") else None
                if isinstance(value, torch.Tensor):
                    s = value.untyped_storage()
                    if s.data_ptr() not in params:
                        storages[s.data_ptr()] = s.nbytes()
            stack.extend(f for f, _ in fn.next_functions)
    return sum(storages.values())


def run_both(out: Path) -> dict[str, Any]:
    """The leaking run and the detached one, each: the growth measured, what the losses keep, the warnings, the
    window's finding. Run with ``MALLOC_MMAP_THRESHOLD_`` set (see :func:`run_in_child`)."""
    from accelerate.state import AcceleratorState, GradientState

    from perf_callbacks.analysis import analyze
    from perf_callbacks.analysis.html.page import render_html
    from perf_callbacks.analysis.render.text import format_text

    result: dict[str, Any] = {}
    for name, detach in (("leak", False), ("detached", True)):
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        hook, losses, warned = leak_run(out / name, detach)
        growth = hook.engine.growth
        window = sorted(hook.engine.layout.run_dir.glob("window-*"))[-1]  # the scheduled one (after the warning's)
        analysed = analyze(window)
        result[name] = {
            "rate": growth.growth.rate if growth is not None and growth.growth is not None else None,
            "readings": growth.detector.seen if growth is not None else 0,
            "true": kept_bytes(losses, hook.params) / len(losses),  # type: ignore[attr-defined]
            "warnings": [str(w.message) for w in warned],
            "found": analysed.memory.growth,
            "text": format_text(analysed),
            "html": render_html(analysed),
            "summary": (window / "summary.txt").read_text() if (window / "summary.txt").exists() else "",
        }
    return result


def run_in_child(out: Path) -> dict[str, Any]:
    """:func:`run_both` in a child process whose glibc maps each allocation above 128 KiB on its own.

    glibc's default raises its mmap threshold to the largest block freed, after which large tensors share the heap
    and the RSS grows by what fragmentation leaves too (about 4-5 MB a step for 2.1 MB kept, in this loop): the RSS,
    which is what the warning measures, then grows faster than the kept tensors. A fixed threshold makes the RSS
    follow the tensors, so the test can hold the rate to them. It also keeps the detached run's RSS flat: under the
    default, the 4-byte losses it keeps pin the heap around each step's freed blocks and the RSS grows by about
    1.8 MB a step (a real growth, which the warning names on CPU; see docs/reference/memory-growth.md).
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore", "MALLOC_MMAP_THRESHOLD_": "131072"}
    proc = subprocess.run([sys.executable, "-m", "tests.integrations.growth_helpers", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads((out / "growth.json").read_text()))


if __name__ == "__main__":
    target = Path(sys.argv[1])
    (target / "growth.json").write_text(json.dumps(run_both(target)))

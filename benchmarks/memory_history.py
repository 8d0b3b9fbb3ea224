"""Cost of ``memory_history`` (allocator history) and of one per-phase peak read, on a CUDA device.

What it measures, alternating the variants round by round to cancel drift:

a. median step time of a plain training loop (an MLP, AdamW) with allocator history off, and on with
   ``max_entries=N`` (``stacks="python"``, what ``memory_history: N`` records), as a ratio and in us/step;
b. the time of one ``PhasePeaks`` phase boundary (read and reset the peak counter); a measured step has 4-5,
   once per logging interval;
c. the time to write one ``snapshot.pickle`` (what the end of each window and an OOM cost with history on).

Usage::

    python benchmarks/memory_history.py --out memory-history.json     # well under a minute on a GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ENTRIES = (10_000, 100_000)


def step_fn(device: torch.device) -> Any:
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.GELU())
                                  for _ in range(8)]).to(device)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 2048, device=device)

    def step() -> None:
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def median_step_us(step: Any, steps: int) -> float:
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def history_cost(step: Any, rounds: int, steps: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"off": [], **{f"on_{n}": [] for n in ENTRIES}}
    for r in range(rounds):
        order = list(samples)[r % len(samples):] + list(samples)[: r % len(samples)]
        for name in order:
            if name != "off":
                torch.cuda.memory._record_memory_history(max_entries=int(name[3:]), stacks="python")
            samples[name].append(median_step_us(step, steps))
            torch.cuda.memory._record_memory_history(enabled=None)
    off = statistics.median(samples["off"])
    out: dict[str, Any] = {"step_us_off": off}
    for n in ENTRIES:
        on = statistics.median(samples[f"on_{n}"])
        out[f"memory_history_{n}"] = {"step_us": on, "extra_us_per_step": on - off, "ratio": on / off}
    return out


def peak_read_us(device: torch.device, n: int = 2000) -> float:
    from perf_callbacks.core.memory.phase_peaks import PhasePeaks

    peaks = PhasePeaks.for_device(device)
    assert peaks is not None
    peaks.arm(0)
    t0 = time.perf_counter()
    for _ in range(n):
        peaks.boundary("forward", 0)  # one phase boundary of a measured step: read, reset, bookkeeping
    return (time.perf_counter() - t0) / n * 1e6


def snapshot_ms(step: Any, entries: int) -> float:
    torch.cuda.memory._record_memory_history(max_entries=entries, stacks="python")
    for _ in range(20):
        step()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        torch.cuda.memory._dump_snapshot(str(Path(tmp) / "snapshot.pickle"))
        spent = (time.perf_counter() - t0) * 1e3
    torch.cuda.memory._record_memory_history(enabled=None)
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/memory_history.py needs a CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    step = step_fn(device)
    for _ in range(10):  # warm up: cuBLAS handles, allocator growth
        step()
    result = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
              **history_cost(step, args.rounds, args.steps), "peak_read_us": peak_read_us(device),
              "snapshot_ms_100000": snapshot_ms(step, 100_000)}
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

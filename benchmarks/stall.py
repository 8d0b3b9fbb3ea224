"""The window-end stall: how long the training loop waits when a profiling window ends.

perf-callbacks' stall is the ``batch_end`` call of a window's last step: stop the profiler, export its events to a
raw file, hand that file to a background job (gzip + analysis). The reference is what a plain ``torch.profiler``
loop waits for: ``prof.stop()`` then ``prof.export_chrome_trace(path)`` (uncompressed, its cheapest form). Both
profile the same steps of the same model; the median of several windows is compared.

    python benchmarks/stall.py [--device cuda] [--windows 7]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf_callbacks.config import PerfConfig  # noqa: E402
from perf_callbacks.core.engine.engine import PerfEngine, RunContext  # noqa: E402

ACTIVE = 5


def _work(model: torch.nn.Module, x: torch.Tensor) -> None:
    model(x).square().mean().backward()


def ours(device: torch.device, tmp: Path, windows: int) -> list[float]:
    """Seconds spent in the last window step's batch_end, per window."""
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).to(device)
    x = torch.randn(64, 256, device=device)
    cycle = 2 + ACTIVE
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 0, "wait": 1, "warmup": 1, "active": ACTIVE,
                                             "repeat": windows}, "summary": True, "memory": False})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp, run_name="stall", device=device, log_every_n_steps=10**6))
    stalls = []
    for step in range(windows * cycle):
        engine.batch_start(step)
        _work(model, x)
        last = step % cycle == cycle - 1
        t0 = time.perf_counter()
        engine.batch_end(stepped=True)
        if last:
            stalls.append(time.perf_counter() - t0)
    engine.close()
    return stalls


def plain(device: torch.device, tmp: Path, windows: int) -> list[float]:
    """Seconds spent in ``prof.stop()`` + ``prof.export_chrome_trace()``, per window."""
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).to(device)
    x = torch.randn(64, 256, device=device)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda"
                                                    else [])
    stalls = []
    for w in range(windows):
        prof = torch.profiler.profile(activities=acts)
        _work(model, x)  # the wait step
        prof.start()
        for step in range(ACTIVE):
            with torch.profiler.record_function(f"ProfilerStep#{step}"):
                _work(model, x)
        t0 = time.perf_counter()
        prof.stop()
        prof.export_chrome_trace(str(tmp / f"plain{w}.json"))
        stalls.append(time.perf_counter() - t0)
    return stalls


def measure(device: str = "cpu", windows: int = 7) -> dict[str, Any]:
    """Median stalls (ms) and their ratio; the target is a ratio of at most 1.2."""
    dev = torch.device(device)
    with tempfile.TemporaryDirectory(prefix="perf-stall-") as tmp:
        a = ours(dev, Path(tmp) / "ours", windows)
        b = plain(dev, Path(tmp), windows)
    ours_ms, plain_ms = statistics.median(a) * 1e3, statistics.median(b) * 1e3
    return {"windows": windows, "active_steps": ACTIVE, "ours_ms": ours_ms, "plain_stop_and_export_ms": plain_ms,
            "ratio": ours_ms / plain_ms if plain_ms > 0 else None}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--windows", type=int, default=7)
    args = parser.parse_args(argv)
    result = measure(args.device, args.windows)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

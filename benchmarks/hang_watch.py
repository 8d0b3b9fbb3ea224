"""Cost of the hang watchdog on the engine's hot path: steps of no work with it off, on (default timeout, 1 poll/s)
and with a 1 s timeout (10 polls/s), alternated round by round; the best and the median time per step of each.

Usage::

    python benchmarks/hang_watch.py                 # 100,000 steps x 3 variants x 7 rounds, about a minute on CPU
    python benchmarks/hang_watch.py --steps 1000 --rounds 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.context import RunContext
from perf_callbacks.core.engine.engine import PerfEngine

VARIANTS = (("off", 0), ("default", None), ("1 s", 1.0))


def per_step(timeout: float | None, steps: int, out: Path) -> float:
    cfg = PerfConfig(hang_timeout=timeout, summary=False, memory=False, flops=False, nvtx=False,
                     schedule={"skip_first": 10**9})  # fmt: skip
    engine = PerfEngine(cfg, RunContext(output_dir=out, run_name="bench", log_every_n_steps=10**9))
    t0 = time.perf_counter()
    for step in range(steps):
        engine.data_start()
        engine.data_end()
        engine.batch_start(step)
        engine.batch_end(True, 8)
    elapsed = (time.perf_counter() - t0) / steps
    engine.state.steps_run = 0  # no "no window was recorded" line at close
    engine.close()
    return elapsed


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name, _ in VARIANTS}
    with tempfile.TemporaryDirectory() as out:
        for r in range(args.rounds):
            for name, timeout in VARIANTS[r % 3 :] + VARIANTS[: r % 3]:
                times[name].append(per_step(timeout, args.steps, Path(out)))
    result = {k: {"best_us": min(v) * 1e6, "median_us": statistics.median(v) * 1e6} for k, v in times.items()}
    for name, r in result.items():
        print(f"hang watch {name:>7}: best {r['best_us']:.3f} us/step, median {r['median_us']:.3f} us/step")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

"""On CUDA: a bf16 GEMM loop reports the MFU that the test computes itself, live and in the window's report.

Each step runs ``GEMMS`` bf16 matmuls of ``SIZE`` x ``SIZE`` and synchronises, so the step time is the device time
of known work: ``2 * SIZE**3 * GEMMS`` FLOPs. The test times each step itself (``perf_counter`` around the step's
body, after the device finished it) and divides by the same peak the engine used: Lightning's table when it knows
the device, else the ``peak_tflops`` the test sets. The engine must agree within 5%, on the FLOPs it counted, in the
live ``perf/train/mfu`` and in ``report``'s ``mfu``; the gap must add up to ``1 - mfu``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
import torch

from perf_callbacks.analysis import analyze
from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.flops.peak import peak_flops

pytestmark = pytest.mark.gpu

SIZE, GEMMS, STEPS, LOG_EVERY = 8192, 8, 40, 10
SCHEDULE = {"skip_first": 24, "wait": 1, "warmup": 1, "active": 6}  # counted on step 0; window 26-31
FALLBACK_PEAK_TFLOPS = 989.0  # only when Lightning's table has no entry for this device (the test uses it too)


def test_bf16_gemm_loop_mfu_matches_the_tests_own_figure(tmp_path: Path) -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    table, _ = peak_flops(device, torch.bfloat16)
    options = {} if table else {"peak_tflops": FALLBACK_PEAK_TFLOPS}
    logged: list[tuple[int, dict[str, float]]] = []
    cfg = PerfConfig.from_dict({"schedule": SCHEDULE, "summary": False, "memory": False, **options})
    engine = PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", device=device,
                                        log_every_n_steps=LOG_EVERY, log_metrics=lambda m, s: logged.append((s, m))))
    a, b = (torch.randn(SIZE, SIZE, device=device, dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty(SIZE, SIZE, device=device, dtype=torch.bfloat16)
    own: dict[int, float] = {}
    for step in range(STEPS):
        engine.data_start()
        engine.data_end()
        engine.batch_start(step)
        t0 = time.perf_counter()
        for _ in range(GEMMS):
            torch.mm(a, b, out=out)
        torch.cuda.synchronize()
        own[step] = time.perf_counter() - t0
        engine.batch_end(True, samples=SIZE)
    engine.close()

    flops = 2 * SIZE**3 * GEMMS
    assert engine.flops.counted_step == 0 and engine.flops.dtype is torch.bfloat16
    assert engine.flops.per_step == pytest.approx(flops, rel=1e-6)
    peak, source = engine.flops.peak()
    assert peak == (table or FALLBACK_PEAK_TFLOPS * 1e12), source

    # live: each interval's MFU against the test's own median over the same steps (the counted step left out)
    profiled = set(range(25, 32))  # warm-up step 25 and the window: left out of the intervals, as step 0 is
    checked = 0
    for step, metrics in logged:
        if "perf/train/mfu" not in metrics:
            continue
        # logged at the end of step `step - 1`: its interval holds steps step-11 .. step-2 (a step's time is known
        # when the next one begins), less the counted and the profiled ones
        steps = [s for s in range(max(step - LOG_EVERY - 1, 0), step - 1) if s != 0 and s not in profiled]
        expected = flops / statistics.median(own[s] for s in steps) / peak
        assert metrics["perf/train/mfu"] == pytest.approx(expected, rel=0.05), (step, metrics)
        checked += 1
    assert checked >= 3

    # report: the window's MFU against the test's own median over the window's steps
    (trace,) = engine.exported
    result = analyze(trace.parent, sidecars=False)
    window = range(26, 32)
    expected = flops / statistics.median(own[s] for s in window) / peak
    assert result.efficiency.mfu == pytest.approx(expected, rel=0.05)
    assert result.efficiency.peak_tflops == pytest.approx(peak / 1e12)
    mfu = result.efficiency
    assert mfu.mfu_gap is not None and sum(mfu.mfu_gap.values()) == pytest.approx(1 - mfu.mfu, abs=1e-9)

"""The precision hint: matrix products, attention and convolutions that ran in fp32 without tensor cores.

Evidence, all from the trace: kernels whose names say fp32 math on CUDA cores (``sgemm``, ``simt``, ``f32f32``,
cuBLAS's ``gemmSN`` on ``float``, fp32 ``fmha`` attention; never a name with ``tf32``), the fp32 input dtypes of the
ops that launched them (``record_shapes=True``), and the live run's settings that our callbacks write into the trace
(``torch.get_float32_matmul_precision()``, ``torch.backends.cuda.matmul.allow_tf32``,
``torch.backends.cudnn.allow_tf32``, the mixed-precision dtype: ``core/windows/device_meta.py``).

The gain is an estimate, and an upper bound: the time those kernels would take at the roofline bound of TF32 (or of
bf16, with half the bytes), from their FLOPs and bytes where the shapes were recorded, else from the ratio of the fp32
and TF32 peaks (the kernels can be no faster than the fp32 peak now, nor than the TF32 peak then). Only a hint whose
kernels take at least ``MIN_WINDOW_SHARE`` of the window is given: on CPU traces, and where the matrix products
already use tensor cores, nothing is said.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache
from statistics import median
from typing import Any

from perf_callbacks.analysis.compute.device_peaks import DEVICE_KEY
from perf_callbacks.analysis.trace.events import RankTrace
from perf_callbacks.analysis.trace.timeline import Timeline
from perf_callbacks.analysis.trace.window import InWindow

MIN_WINDOW_SHARE = 0.02
"""The fp32 kernels' least share of the window for a hint: less could buy no more than that."""
_FP32_MATH = re.compile(r"sgemm|simt|f32f32|gemmsn_\w*<float|fmha\w*_f32_", re.IGNORECASE)
_SETTINGS = ("float32_matmul_precision", "cuda_matmul_allow_tf32", "cudnn_allow_tf32", "mixed_precision")


@lru_cache(maxsize=4096)
def fp32_math(kernel: str) -> bool:
    """Whether a kernel's name says fp32 matrix math on CUDA cores (no tensor cores); asked once per name.

    Example:
        >>> fp32_math("cutlass_80_simt_sgemm_256x128_8x4_nt_align1"), fp32_math("cutlass_80_tensorop_s1688tf32gemm")
        (True, False)
        >>> fp32_math("implicit_convolve_sgemm"), fp32_math("fmha_cutlassF_f32_aligned_64x64_rf_sm80")
        (True, True)
        >>> fp32_math("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x128x16"), fp32_math("nvjet_sm90_tst_128x256")
        (False, False)
    """
    return bool(_FP32_MATH.search(kernel)) and "tf32" not in kernel.lower()


def rank_precision(
    trace: RankTrace, tl: Timeline, rows: list[dict[str, Any]], peaks: dict[str, Any]
) -> dict[str, Any] | None:
    """One rank's hint (see the module), None when there is nothing to say."""
    if not trace.has_gpu:
        return None
    inside = InWindow.of(tl)
    kernels: dict[str, float] = defaultdict(float)  # ms by kernel name
    busy = 0.0
    for ts, end, kind, name, *_ in trace.gpu:
        if kind == "kernel" and inside(ts):
            busy += end - ts
            if fp32_math(name):
                kernels[name] += (end - ts) / 1e3
    span_ms = max(tl.measured_us, 1e-9) / 1e3
    time_ms = sum(kernels.values())
    if time_ms < MIN_WINDOW_SHARE * span_ms:
        return None
    hint = {
        "kernels": [
            {"name": n, "time_ms": ms, "share": ms / (busy / 1e3)}
            for n, ms in sorted(kernels.items(), key=lambda kv: -kv[1])
        ],
        "time_ms": time_ms,
        "device_share": time_ms / (busy / 1e3),
        "window_share": time_ms / span_ms,
        "settings": _settings(trace.meta),
        "dtype_evidence": _evidence(rows, kernels),
    }
    hint.update(estimate(rows, kernels, time_ms, peaks, span_ms, _step_ms(trace, tl)))
    hint["text"] = hint_text(hint)
    return hint


def estimate(
    rows: list[dict[str, Any]],
    kernels: dict[str, float],
    time_ms: float,
    peaks: dict[str, Any],
    span_ms: float,
    step_ms: float | None,
) -> dict[str, Any]:
    """The estimated gain at TF32 and at bf16: window milliseconds, per step, as a share of the window, and why."""
    tflops, tbps = peaks.get("tflops") or {}, peaks.get("tbps")
    out: dict[str, Any] = {"estimated_gain": {}}
    for target in ("tf32", "bf16"):
        if not tflops.get(target) or not tflops.get("fp32"):
            continue
        saved, shaped = 0.0, 0.0
        for r in rows:
            mine = sum(k["time_ms"] for k in r["kernels"] if k["name"] in kernels)
            if not mine or r["flops"] is None or r["dtype"] != "fp32":
                continue
            shaped += mine
            new_s = r["flops"] / (tflops[target] * 1e12)
            if tbps and r["bytes"] is not None:
                new_s = max(new_s, r["bytes"] / (2 if target == "bf16" else 1) / (tbps * 1e12))
            saved += max(r["device_time_ms"] - new_s * 1e3, 0.0) * mine / r["device_time_ms"]
        saved += max(time_ms - shaped, 0.0) * (1.0 - tflops["fp32"] / tflops[target])
        fraction = saved / span_ms
        out["estimated_gain"][target] = {
            "window_ms": saved,
            "fraction": fraction,
            "ms_per_step": fraction * step_ms if step_ms else None,
        }
    best = out["estimated_gain"].get("tf32")
    out["estimated_gain_ms"] = best["ms_per_step"] if best else None
    out["estimated_gain_fraction"] = best["fraction"] if best else None
    out["basis"] = _basis(rows, kernels, peaks, best is not None)
    return out


def hint_text(hint: dict[str, Any]) -> str:
    """The hint as one recommendation line."""
    names = ", ".join(_short(k["name"]) for k in hint["kernels"][:3])
    text = (
        f"fp32 matrix math without tensor cores: {names} take {hint['device_share']:.0%} of device time "
        f"({hint['window_share']:.0%} of the window)"
    )
    if hint["dtype_evidence"]:
        text += f"; {hint['dtype_evidence']}"
    gains = hint["estimated_gain"]
    if gains:
        parts = [
            f"{t.upper()} up to -{g['ms_per_step']:.1f} ms per step (-{g['fraction']:.0%})"
            if g["ms_per_step"] is not None
            else f"{t.upper()} up to -{g['fraction']:.0%} of the window"
            for t, g in gains.items()
        ]
        text += f"; estimated gain (an upper bound: the kernels at the new roofline bound): {', '.join(parts)}"
    settings = hint["settings"]
    if settings.get("float32_matmul_precision") == "highest":
        text += "; the run had torch.get_float32_matmul_precision() == 'highest'"
    return text + ": call torch.set_float32_matmul_precision('high') for TF32, or train in bf16 mixed precision"


def combine(
    ranks: list[tuple[int, dict[str, Any] | None, list[dict[str, Any]], float]],
    peaks: dict[str, Any],
    step_ms: float | None,
) -> dict[str, Any] | None:
    """The window's hint: the rank with the most fp32 kernel time (named when there are several ranks).

    Args:
        ranks: each rank's number, hint, roofline rows and window length in ms.
        peaks: the window's peaks (``--peak-tbps`` applied): the gain is estimated again with them.
        step_ms: the window's median step time, for the gain per step.
    """
    found = [x for x in ranks if x[1]]
    if not found:
        return None
    rank, hint, rows, span_ms = max(found, key=lambda x: x[1]["time_ms"] if x[1] else 0.0)
    assert hint is not None
    kernels = {k["name"]: k["time_ms"] for k in hint["kernels"]}
    out = {**hint, "rank": rank, **estimate(rows, kernels, hint["time_ms"], peaks, span_ms, step_ms)}
    out["text"] = (f"rank {rank}: " if len(ranks) > 1 else "") + hint_text(out)
    return out


def _evidence(rows: list[dict[str, Any]], kernels: dict[str, float]) -> str:
    shaped = [
        r
        for r in rows
        if r["dtype"] == "fp32"
        and r.get("flops_source") == "recorded shapes"
        and any(k["name"] in kernels for k in r["kernels"])
    ]
    ops = sorted({r["op"] for r in shaped})
    calls = sum(r["count"] for r in shaped)
    return f"{calls} calls of {', '.join(ops)} with fp32 inputs" if ops else ""


def _basis(rows: list[dict[str, Any]], kernels: dict[str, float], peaks: dict[str, Any], known: bool) -> str:
    if not known:
        return "no estimate: the device's fp32 and TF32 peaks are not known (set peak_tflops)"
    mine = [r for r in rows if r["flops"] is not None and any(k["name"] in kernels for k in r["kernels"])]
    if any(r["bytes"] is not None for r in mine):
        how = "FLOPs and bytes from the recorded shapes"
    elif mine:
        how = "FLOPs from the run's FlopCounterMode count (no shapes, so no bytes)"
    else:
        how = "the ratio of the fp32 and TF32 peaks (no FLOPs known)"
    bw = f", {peaks['tbps']:g} TB/s" if peaks.get("tbps") else ""
    return (
        f"estimate, upper bound: the fp32 kernels' time at the TF32 roofline bound ({peaks['tflops']['tf32']:g} "
        f"TFLOP/s{bw}) from {how}; peaks: {peaks.get('tflops_source') or 'n/a'}"
    )


def _settings(meta: dict[str, Any]) -> dict[str, Any]:
    own = meta.get(DEVICE_KEY)
    return {k: own[k] for k in _SETTINGS if k in own} if isinstance(own, dict) else {}


def _step_ms(trace: RankTrace, tl: Timeline) -> float | None:
    times = [(end - ts) / 1e3 for _n, ts, end, _tid in trace.steps if tl.lo <= ts < tl.hi]
    return median(times) if times else None


def _short(name: str) -> str:
    inner = re.search(r"<(\w+)>", name)
    base = inner.group(1) if inner and name.startswith("void cutlass") else name.removeprefix("void ")
    return base if len(base) <= 48 else base[:45] + "..."

"""Verdicts and ranked recommendations: the cause of the largest removable loss, with its evidence and its fix."""

from __future__ import annotations

from collections.abc import Callable

from perf_callbacks.analysis.result import RankResult

THRESHOLD = 0.10
VERDICT_OF = {
    "input": "input_bound",
    "host": "host_bound",
    "sync": "sync_bound",
    "copy": "copy_bound",
    "communication": "communication_bound",
}


def verdict_from(losses: dict[str, float]) -> str:
    """Return the verdict for losses given as fractions of the window: ``compute_bound`` unless one reaches 10%.

    Example:
        >>> verdict_from({"input": 0.6, "sync": 0.2})
        'input_bound'
        >>> verdict_from({"input": 0.05, "host": 0.02})
        'compute_bound'
    """
    cause, worst = max(losses.items(), key=lambda kv: kv[1], default=("", 0.0))
    return VERDICT_OF[cause] if worst >= THRESHOLD else "compute_bound"


def judge_rank(r: RankResult) -> None:
    """Set ``r.verdict`` and ``r.recommendations`` (largest loss first, profiler caveats right after)."""
    r.verdict = verdict_from(r.losses)
    ranked = sorted(((share, _ADVICE[c](r, share)) for c, share in r.losses.items() if share >= 0.02), reverse=True)
    recs = [text for _, text in ranked]
    if r.verdict == "compute_bound":
        recs.insert(0, _compute_advice(r))
    caveat = _profiler_caveat(r)
    if caveat:
        recs.insert(1 if r.verdict in ("host_bound", "sync_bound") else len(recs), caveat)
    memory = _memory_note(r)
    if memory:
        recs.append(memory)
    r.recommendations = recs


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.01 else f"{x:.1%}"


def _input_advice(r: RankResult, share: float) -> str:
    loader = r.data_loader or "data loading"
    where = f"{loader} took {_pct(r.data_wait_fraction)} of step time"
    if loader.startswith("enumerate(DataLoader)#_SingleProcess"):
        return f"{where} with num_workers=0 (device idle {_pct(share)}): raise num_workers (e.g. 4-8) and set " \
               "pin_memory=True, persistent_workers=True"
    return f"{where} (device idle {_pct(share)} waiting for batches): raise num_workers or prefetch_factor, or make " \
           "__getitem__ cheaper (decode/augment on the GPU, cache preprocessed samples)"


def _sync_advice(r: RankResult, share: float) -> str:
    calls = ", ".join(f"{n} ({ms:.1f} ms)" for n, ms in list(r.sync_calls_ms.items())[:3])
    return f"the device went idle right after blocking calls returned, {_pct(share)} of the time: {calls}: " \
           "remove .item()/.cpu()/print(tensor) from the step, keep metrics on the device and read them every N steps"


def _host_advice(r: RankResult, share: float) -> str:
    per_step = f"{r.launches_per_step:.0f} kernels per step, " if r.launches_per_step else ""
    return f"the device waited {_pct(share)} of the time for the host to launch work ({per_step}GPU busy " \
           f"{_pct(r.gpu_utilization or 0.0)}): cut Python and launch overhead with torch.compile or CUDA graphs, " \
           "fused/foreach optimizers, and a larger batch per step"


def _copy_advice(r: RankResult, share: float) -> str:
    worst = max(r.copies_ms.items(), key=lambda kv: kv[1], default=("memcpy", 0.0))
    fix = "use pinned memory (pin_memory=True) and .to(device, non_blocking=True)" if "pageable" in worst[0] else \
        "overlap copies with compute on a side stream, or keep the data on the device"
    return f"copies not overlapped with compute took {_pct(share)} of the time (largest: {worst[0]} " \
           f"{worst[1]:.1f} ms): {fix}"


def _comm_advice(r: RankResult, share: float) -> str:
    tot, over = r.comm_ms.get("total", 0.0), r.comm_ms.get("overlapped", 0.0)
    return f"collectives were exposed {_pct(share)} of the time ({tot:.1f} ms in collectives, {over:.1f} ms " \
           "overlapped with compute): overlap them (DDP bucket_cap_mb, FSDP prefetch), fix stragglers first, or " \
           "communicate less often (gradient accumulation with no_sync)"


_ADVICE: dict[str, Callable[[RankResult, float], str]] = {
    "input": _input_advice,
    "sync": _sync_advice,
    "host": _host_advice,
    "copy": _copy_advice,
    "communication": _comm_advice,
}


def _compute_advice(r: RankResult) -> str:
    top = r.top_ops[0] if r.top_ops else None
    lead = f"{top['name']} has {_pct(top['fraction'])} of self {top['device']} time" if top else "no single op leads"
    busy = f"GPU busy {_pct(r.gpu_utilization)}" if r.gpu_utilization is not None else "no removable loss found"
    return f"compute-bound ({busy}; {lead}): speed up the math itself: bf16/TF32, torch.compile, fused or flash " \
           "attention kernels"


def _profiler_caveat(r: RankResult) -> str | None:
    flags = [f for f in r.profiler_flags if f in ("with_stack", "record_shapes")]
    if not flags:
        return None
    opts = " and ".join(f"{f}=True" for f in flags)
    verb = "were" if len(flags) > 1 else "was"
    return f"{opts} {verb} on in this window: it adds host time to every op, so host-side figures are inflated; " \
           "profile again without it to confirm a host-bound verdict"


def _memory_note(r: RankResult) -> str | None:
    if r.peak_memory_bytes is None or not r.device_memory_bytes:
        return None
    share = r.peak_memory_bytes / r.device_memory_bytes
    gb = f"{r.peak_memory_bytes / 1e9:.2f} of {r.device_memory_bytes / 1e9:.0f} GB"
    if share >= 0.9:
        return f"peak memory {gb} ({_pct(share)}): close to OOM; use activation checkpointing or a smaller batch"
    if share < 0.3 and r.verdict in ("host_bound", "compute_bound"):
        return f"peak memory only {gb} ({_pct(share)}): there is room for a larger batch"
    return None

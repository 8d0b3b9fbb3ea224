"""The text of each recommendation: a cause's evidence and its fix, the compute-bound advice and the caveats.

``verdict.judge_rank`` decides which of them a rank gets, and in which order.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import median
from typing import Any

from perf_callbacks.analysis.judge.advice import BUSY, loader_fix, measured_fix
from perf_callbacks.analysis.judge.evidence import input_evidence
from perf_callbacks.analysis.judge.load import loader_evidence
from perf_callbacks.analysis.results.result import RankResult
from perf_callbacks.analysis.trace.machine import cores_per_rank
from perf_callbacks.analysis.trace.schema import mtia_kind

HOST_UNTRACED = "the host side was not traced (device activity, but no runtime call such as cudaLaunchKernel)"


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.01 else f"{x:.1%}"


def _num_workers(r: RankResult) -> int | None:
    """The loader's ``num_workers``: as our callbacks recorded it, 0 for torch's single-process iterator, else None."""
    workers = r.machine.get("num_workers") if r.machine else None
    if workers is None and (r.data_loader or "").startswith("enumerate(DataLoader)#_SingleProcess"):
        return 0
    return workers if isinstance(workers, int) else None


def _input_advice(r: RankResult, share: float) -> str:
    loader = r.data_loader or "data loading"
    where = f"{loader} took {_pct(r.data_wait_fraction)} of step time"
    idle = f"device idle {_pct(share)}" if r.gpu_utilization is not None else f"{_pct(share)} of the window"
    workers = _num_workers(r)
    evidence = loader_evidence(r, input_evidence(r).share) if r.load else None
    fix = measured_fix(evidence) if evidence is not None else loader_fix(workers, cores_per_rank(r.machine))
    if workers == 0:
        pin = "pin_memory=True, " if r.gpu_utilization is not None and r.device_kind in (None, "cuda") else ""
        return f"{where} with num_workers=0 ({idle}): {fix} and set {pin}persistent_workers=True"
    on_gpu = "decode/augment on the GPU, " if r.gpu_utilization is not None or r.cuda_on_host else ""
    if evidence is not None and evidence.busy_share is not None:  # the fix names what the workers' load says
        return f"{where} ({idle} waiting for batches): {fix}"
    return f"{where} ({idle} waiting for batches): {fix} ({on_gpu}cache preprocessed samples)"


def _contention_advice(r: RankResult, share: float) -> str:
    load, cores = r.load, cores_per_rank(r.machine)
    ran = f", ran {load['ran_ms'] / load['wall_ms']:.0%}" if load.get("ran_ms") is not None else ""
    workers = r.machine.get("num_workers") if r.machine else None
    if load.get("workers") and load.get("workers_cpu_ms") is not None:
        workers_ran = load["workers_cpu_ms"] / (load["workers"] * load["wall_ms"])
        ran += f"; its {load['workers']} DataLoader workers ran {workers_ran:.0%} of the time"
    of = f" ({cores} per local rank)" if cores is not None else ""
    fewer = f"DataLoader workers (num_workers={workers} now) " if workers and not _blocked_workers(load) else ""
    return f"the training thread waited for a CPU {_pct(share)} of the window ({load.get('run_queue_ms', 0.0):.0f} " \
           f"of {load.get('wall_ms', 0.0):.0f} ms{ran}): other threads or processes held the CPU cores{of}, and " \
           "every figure of this window is stretched by it: run fewer threads than cores per rank (" \
           f"{f'fewer {fewer}or torch threads' if fewer else 'fewer torch threads'}: torch.set_num_threads, " \
           "OMP_NUM_THREADS), and look for other processes on " \
           "the machine"


def _blocked_workers(load: dict[str, Any]) -> bool:
    """Whether the workers were blocked (I/O, sleep) most of their time: fewer of them would only wait longer."""
    if not load.get("workers") or load.get("workers_cpu_ms") is None:
        return False
    busy = (load["workers_cpu_ms"] + (load.get("workers_run_queue_ms") or 0.0)) / (load["workers"] * load["wall_ms"])
    return bool(busy < BUSY)


def _sync_advice(r: RankResult, share: float) -> str:
    calls = ", ".join(f"{n} ({ms:.1f} ms)" for n, ms in list(r.sync_calls_ms.items())[:3])
    return f"the device went idle right after blocking calls returned, {_pct(share)} of the time: {calls}: " \
           "remove .item()/.cpu()/print(tensor) from the step, keep metrics on the device and read them every N steps"


def _host_advice(r: RankResult, share: float) -> str:
    per_step = f"{r.launches_per_step:.0f} kernels per step, " if r.launches_per_step else ""
    cuda = r.device_kind in (None, "cuda")
    where = f"({per_step}{'GPU' if cuda else 'device'} busy {_pct(r.gpu_utilization or 0.0)})"
    fix = "cut Python and launch overhead with torch.compile or CUDA graphs, fused/foreach optimizers, and a larger " \
          "batch per step" if cuda else "cut Python and launch overhead: fewer, larger ops and a larger batch per step"
    return f"the device waited {_pct(share)} of the time for the host to launch work {where}: {fix}"


_COPY_FIX = {
    "HtoD/pageable": "copy from pinned memory (DataLoader pin_memory=True) with .to(device, non_blocking=True)",
    "DtoH/pageable": "read results back less often, into pinned buffers, with non_blocking=True",
    "HtoD/host": "if the host buffers are pageable (the trace does not say), pin them (DataLoader pin_memory=True) "
                 "and copy with .to(device, non_blocking=True); else start the copy early on a side stream",
    "DtoH/host": "read results back less often: keep metrics on the device and fetch them every N steps",
    "HtoD/pinned": "start the next batch's copy early (non_blocking=True on a side stream, or a prefetcher) so it "
                   "overlaps compute",
    "DtoH/pinned": "read results back less often: keep metrics on the device and fetch them every N steps",
    "DtoH/device": "read results back less often: keep metrics on the device and fetch them every N steps",
    "DtoD/device": "the data is already on the device: find the ops that copy it (.contiguous(), .clone(), dtype "
                   "casts, torch.cat, non-fused optimizer states) and use views, in-place or fused ops",
    "PtoP/device": "peer-to-peer copies between devices: keep each tensor on the device that uses it, or move the "
                   "transfer into a collective",
    "memset": "buffers are zeroed on the device: use zero_grad(set_to_none=True) and torch.empty where the values "
              "are overwritten",
}


def _copy_advice(r: RankResult, share: float) -> str:
    parts = [f"{k} {ms:.1f} ms: {_COPY_FIX.get(k, 'overlap it with compute on a side stream')}"
             for k, ms in r.named_copies()]
    return f"copies not overlapped with compute took {_pct(share)} of the time; by kind, " + "; ".join(parts)


def _comm_advice(r: RankResult, share: float) -> str:
    """The collectives' advice, quoting the collectives table's names and times where the rank has the table."""
    if r.measures.communication:
        by_name: dict[str, float] = {}
        for row in r.measures.communication:  # the table's rows, most time first; one figure per collective
            by_name[row["name"]] = by_name.get(row["name"], 0.0) + row["total_ms"]
        tot, exposed = sum(by_name.values()), sum(row["exposed_ms"] for row in r.measures.communication)
        named, figures = by_name, f"{tot:.1f} ms in collectives, {exposed:.1f} ms exposed"
    else:
        tot, over = r.comm_ms.get("total", 0.0), r.comm_ms.get("overlapped", 0.0)
        named, figures = r.collectives_by_op_ms, f"{tot:.1f} ms in collectives, {over:.1f} ms overlapped with compute"
    ops = ", ".join(f"{name} {ms:.1f} ms" for name, ms in list(named.items())[:3])
    which = f" ({ops})" if ops else ""
    return f"collectives{which} were exposed {_pct(share)} of the time ({figures}): overlap them (DDP " \
           "bucket_cap_mb, FSDP prefetch), fix stragglers first, or communicate less often (gradient accumulation " \
           "with no_sync)"


def host_untraced(r: RankResult) -> bool:
    """Whether the trace has device activity but no runtime call: when the host launched its work is unknown."""
    return not r.host_traced


def _other_advice(r: RankResult, share: float) -> str:
    if host_untraced(r):
        return f"{HOST_UNTRACED}: the device idled {_pct(share)} of the time, which cannot be put down to the host, " \
               "the input pipeline or syncs without it; profile with activities=[CPU, CUDA] to find out"
    graph = r.graph_idle_fraction
    inside = ""
    if graph >= 0.01:
        inside = f"; {_pct(graph)} of the window is inside CUDA graph replays (between kernels of one " \
                 "cudaGraphLaunch): look for graph nodes waiting on other streams, events or host nodes"
    lead = f"unexplained idle {_pct(share)}: the device idled although its next op had already been launched"
    return f"{lead}{inside}; look at cross-stream waits (cudaStreamWaitEvent), work on other devices or " \
           "processes, and the gaps in an Nsight Systems timeline (perf-callbacks nsys)"


def backlog_note(r: RankResult) -> str:
    """The window began while the device still ran earlier work: not host idle, and too short a window to judge."""
    return f"backlog {_pct(r.backlog_fraction)}: at the window's start the device was still running work queued " \
           "before it (its first op started long after its launch); that time is not host idle, and the window " \
           "is too short to judge: profile more steps (schedule.active) to see the steady state"


ADVICE: dict[str, Callable[[RankResult, float], str]] = {
    "input": _input_advice,
    "sync": _sync_advice,
    "host": _host_advice,
    "copy": _copy_advice,
    "communication": _comm_advice,
    "other": _other_advice,
    "cpu_contention": _contention_advice,
}


def compute_advice(r: RankResult) -> str:
    """The first recommendation of a ``compute_bound`` rank: what leads, and how to make the math itself faster.

    The op that leads is a kernel: on MTIA an ``event_wait`` (the queue waiting on an event) or a DMA is skipped.
    Without device activity in the trace the time is host compute: CUDA profiling is suggested only where the machine
    had CUDA (``RankResult.cuda_on_host``).
    """
    top = next((o for o in r.top_ops if r.device_kind != "mtia" or mtia_kind(o["name"]) == "kernel"), None)
    lead = f"{top['name']} has {_pct(top['fraction'])} of self {top['device']} time" if top else "no single op leads"
    if r.gpu_utilization is None:
        see = ", or profile with activities=[CPU, CUDA] to see the device" if r.cuda_on_host else ""
        return f"host compute: no device in the trace, and no removable host-side loss found ({lead}): speed up the " \
               f"host code{see}{_host_compute_hints(r)}"
    if r.device_kind not in (None, "cuda"):
        return f"compute-bound (device busy {_pct(r.gpu_utilization)}; {lead}): speed up the device kernels themselves"
    busy = f"GPU busy {_pct(r.gpu_utilization)}"
    return f"compute-bound ({busy}; {lead}): speed up the math itself: bf16/TF32, torch.compile, fused or flash " \
           "attention kernels"


TINY_STEP_MS = 5.0
"""A host-compute step under this is mostly per-step overhead (Python, the optimizer, dispatch), not the math."""


def _host_compute_hints(r: RankResult) -> str:
    """What host compute can try beyond faster code: bf16 on a CPU that has it, amortising a tiny step's overhead."""
    hints, times = [], [s.time_ms for s in r.steps if s.time_ms > 0]
    step = r.step_time_ms or (median(times) if times else None)
    if step is not None and 0 < step < TINY_STEP_MS:
        hints.append(f"a step of {step:.1f} ms is mostly per-step overhead (Python, the optimizer, "
                     "dispatch): a larger batch, or gradient accumulation, spreads it over more samples, and "
                     "torch.compile cuts it")
    if (r.machine or {}).get("cpu_bf16") and not r.cuda_on_host:
        hints.append("this CPU computes in bf16 natively (avx512_bf16/amx_bf16): try torch.autocast('cpu', "
                     "dtype=torch.bfloat16) around the forward pass and check the loss")
    return "".join(f"; {h}" for h in hints)


def profiler_caveat(r: RankResult) -> str | None:
    """A caveat when ``with_stack``/``record_shapes`` inflated figures the verdict rests on, else None.

    Both add host time to every op this process runs. What that inflates depends on the verdict: the host figures of a
    ``host_bound`` window, the relaunch after each sync of a ``sync_bound`` one, the loading of an ``input_bound`` one
    only when it runs in this process (``num_workers=0``); never the device time behind a copy, communication or
    device-compute verdict (None for ``compute_bound`` on a device: host overhead can only hide it).
    """
    flags = [f for f in r.profiler_flags if f in ("with_stack", "record_shapes")]
    if not flags or (r.verdict == "compute_bound" and r.gpu_utilization is not None):
        return None
    opts = " and ".join(f"{f}=True" for f in flags)
    verb = "were" if len(flags) > 1 else "was"
    return f"{opts} {verb} on in this window: it adds host time to every op this process runs, {_inflated(r)}"


def _inflated(r: RankResult) -> str:
    """What the profiler's host overhead inflates for ``r``'s verdict, and what to do about it."""
    verdict = r.verdict
    if verdict == "host_bound":
        return "so host-side figures are inflated; profile again without it to confirm a host-bound verdict"
    if verdict == "compute_bound":  # no device in the trace: the host op times are the compute
        return "so the host op times are inflated; profile again without it to time the host code"
    if verdict == "sync_bound":
        return "and after each sync the device idles until the host launches again, so the sync time is inflated " \
               "with it; profile again without it to measure what the syncs cost"
    if verdict == "input_bound":
        if _num_workers(r) == 0:
            return "and with num_workers=0 the loading runs in this process, so the data wait is inflated with it; " \
                   "profile again without it to time the loading"
        return "not the DataLoader's worker processes, so the wait for data behind this verdict is not inflated " \
               "(unless num_workers=0, where loading runs here); only the host op times are"
    if verdict in ("copy_bound", "communication_bound"):
        what = "copies" if verdict == "copy_bound" else "collectives"
        return f"not the device's {what}, so the {what}' time behind this verdict is not inflated; only the host " \
               "op times are"
    if verdict == "unexplained_idle":
        return "so host op times are inflated, and part of the unexplained idle may be that host time; profile " \
               "again without it"
    return f"so host op times are inflated; the {verdict} verdict does not rest on them"


def memory_note(r: RankResult) -> str | None:
    """Close to OOM, or room for a larger batch (when the verdict is host- or compute-bound), else None."""
    if r.memory.peak_bytes is None or not r.memory.device_bytes:
        return None
    share = r.memory.peak_bytes / r.memory.device_bytes
    gb = f"{r.memory.peak_bytes / 1e9:.2f} of {r.memory.device_bytes / 1e9:.0f} GB"
    if share >= 0.9:
        return f"peak memory {gb} ({_pct(share)}): close to OOM; use activation checkpointing or a smaller batch"
    if share < 0.3 and r.verdict in ("host_bound", "compute_bound"):
        return f"peak memory only {gb} ({_pct(share)}): there is room for a larger batch"
    return None

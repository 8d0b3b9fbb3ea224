"""The text of ``oom-rank{R}/summary.txt``: pure formatting of what :mod:`perf_callbacks.core.memory.oom` collected.

Example:
    >>> facts = OOMFacts(rank=0, step=4, phase="backward", error="OutOfMemoryError: CUDA out of memory")
    >>> print(format_summary(facts).splitlines()[0])
    out of memory on rank 0 at step 4, phase backward
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from perf_callbacks.analysis.measures.text import size as size_text
from perf_callbacks.analysis.memory.parts import CATEGORY_ADVICE

MEMORY_VIZ = "https://pytorch.org/memory_viz"
_GB = 1e9
_FRAGMENTED = 0.2  # share of reserved memory that is cached but unused, above which fragmentation is called high


@dataclass
class OOMFacts:
    """What is known when a rank runs out of memory; byte counts are None where they do not exist (CPU)."""

    rank: int
    step: int | None
    phase: str | None
    error: str
    batch: str | None = None
    allocated: int | None = None
    reserved: int | None = None
    peak: int | None = None
    total: int | None = None
    largest_allocations: list[int] = field(default_factory=list)
    largest_free_block: int | None = None
    host_rss: int | None = None
    host_peak_rss: int | None = None
    host_total: int | None = None
    phase_peaks: dict[str, float] = field(default_factory=dict)  # MB
    phase_peaks_step: int | None = None
    captured: str = "when the exception reached the training loop"
    categories: dict[str, int] = field(default_factory=dict)  # parameters, gradients, optimizer_state (bytes)
    files: list[str] = field(default_factory=list)


def format_summary(f: OOMFacts) -> str:
    """The whole summary, one fact a line, ending with the advice and where the files are."""
    where = f"step {f.step}" if f.step is not None else "an unknown step"
    lines = [f"out of memory on rank {f.rank} at {where}, phase {f.phase or 'unknown'}", f"  error: {f.error}"]
    lines.append(f"  batch: {f.batch}" if f.batch else "  batch: unknown")
    lines += _device_lines(f)
    lines.append(
        f"  host: RSS {_gb(f.host_rss)}, peak RSS {_gb(f.host_peak_rss)}, total {_gb(f.host_total)}"
    )
    lines += _category_lines(f)
    if f.phase_peaks:
        peaks = ", ".join(f"{name} {mb * 2**20 / _GB:.2f} GB" for name, mb in f.phase_peaks.items())
        lines.append(f"  per-phase peaks (step {f.phase_peaks_step}, the last measured): {peaks}")
    else:
        lines.append("  per-phase peaks: none measured (CUDA only, one step per logging interval)")
    lines.append("advice:")
    lines += [f"  - {a}" for a in advice(f)]
    if f.files:
        lines.append("files: " + ", ".join(f.files))
    if "snapshot.pickle" in f.files:
        lines.append(f"  open snapshot.pickle at {MEMORY_VIZ} (drag and drop the file; it stays on your machine)")
    return "\n".join(lines) + "\n"


def advice(f: OOMFacts) -> list[str]:
    """Suggestions that follow from the phase, the per-phase peaks and fragmentation; most specific first."""
    out: list[str] = list(_category_advice(f))
    top = max(f.phase_peaks.items(), key=lambda kv: kv[1])[0] if f.phase_peaks else None
    if f.phase in ("forward", "backward") or top in ("forward", "backward"):
        why = _why(f, top, ("forward", "backward"))
        out.append(f"{why}, where the activations saved by forward are held until backward frees them: use "
                   "activation checkpointing (torch.utils.checkpoint, or your model's gradient checkpointing option)")
        out.append(f"use a smaller batch{_batch_hint(f.batch)} and keep the effective batch with gradient accumulation")
    if f.phase == "optimizer_step" or top == "optimizer_step":
        out.append(f"{_why(f, top, ('optimizer_step',))}: shard optimizer state across ranks (FSDP, DeepSpeed "
                   "ZeRO-1/2, ZeroRedundancyOptimizer) or use a lower-memory optimizer (8-bit Adam, SGD)")
    frag = _fragmentation(f)
    if frag is not None and frag >= _FRAGMENTED:
        out.append(f"{frag:.0%} of reserved memory is cached but unused (fragmentation): set "
                   "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    if f.phase == "validation":
        out.append("evaluation ran out of memory: run it under torch.no_grad() and use a smaller evaluation batch")
    if f.phase == "checkpoint":
        out.append("saving a checkpoint ran out of memory: save sharded state (torch.distributed.checkpoint) instead "
                   "of gathering a full state dict on one rank")
    if f.phase == "data_wait":
        out.append("the failure came between steps (data loading, host-to-device copies): check batch collation "
                   "and tensors kept alive from the previous step")
    if not out:
        out.append("a smaller batch, activation checkpointing, or sharding parameters and optimizer state")
    return out


def rest_bytes(f: OOMFacts) -> int | None:
    """Allocated device memory that is neither parameters, gradients nor optimizer state (activations, temporaries)."""
    if f.allocated is None or not f.categories:
        return None
    return max(f.allocated - sum(f.categories.values()), 0)


def _category_lines(f: OOMFacts) -> list[str]:
    if not f.categories:
        return []
    c = f.categories
    where = "device" if f.allocated is not None else "host"
    line = (f"  {where} memory by category: parameters {size_text(c.get('parameters'))}, gradients "
            f"{size_text(c.get('gradients'))}, optimizer state {size_text(c.get('optimizer_state'))}")
    rest = rest_bytes(f)
    if rest is not None:
        line += f", activations and temporaries {size_text(rest)} (allocated less the three)"
    return [line]


def _category_advice(f: OOMFacts) -> list[str]:
    """One suggestion for the largest part of the memory held at the failure, when the parts are known."""
    if not f.categories:
        return []
    parts = dict(f.categories)
    rest = rest_bytes(f)
    if rest is not None:
        parts["activations"] = rest
    name, nbytes = max(parts.items(), key=lambda kv: kv[1])
    if nbytes <= 0:
        return []
    fix = CATEGORY_ADVICE.get(name)
    return [f"{name.replace('_', ' ')} is the largest part ({size_text(nbytes)}): {fix}"] if fix else []


def requested(error: str) -> str | None:
    """The size in ``Tried to allocate 2.00 GiB``, if the message has one."""
    m = re.search(r"[Tt]ried to allocate ([0-9.]+ [KMGT]?i?B)", error)
    return m.group(1) if m else None


def _device_lines(f: OOMFacts) -> list[str]:
    if f.allocated is None:
        return ["  device: no device memory counters (CPU run); host numbers below"]
    lines = [f"  device: allocated {_gb(f.allocated)}, reserved {_gb(f.reserved)}, peak {_gb(f.peak)}, "
             f"total {_gb(f.total)} (captured {f.captured})"]
    want = requested(f.error)
    if want:
        lines.append(f"  requested: {want}")
    if f.largest_allocations:
        lines.append("  largest live allocations: " + ", ".join(_gb(b) for b in f.largest_allocations))
    frag = _fragmentation(f)
    if frag is not None and f.reserved is not None:
        lines.append(f"  fragmentation: reserved - allocated = {_gb(f.reserved - f.allocated)} ({frag:.0%} of "
                     f"reserved), largest free block {_gb(f.largest_free_block)}")
    return lines


def _fragmentation(f: OOMFacts) -> float | None:
    if f.allocated is None or not f.reserved:
        return None
    return max(f.reserved - f.allocated, 0) / f.reserved


def _why(f: OOMFacts, top: str | None, phases: tuple[str, ...]) -> str:
    if top in phases:
        return f"{top} had the largest per-phase peak ({f.phase_peaks[top] * 2**20 / _GB:.2f} GB)"
    return f"it failed in {f.phase}"


def _batch_hint(batch: str | None) -> str:
    m = re.match(r"size (\d+)", batch or "")
    return f" (now {m.group(1)})" if m else ""


def _gb(n: int | None) -> str:
    return "unknown" if n is None else f"{n / _GB:.2f} GB"

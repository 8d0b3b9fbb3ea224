"""The nested parts of a result: its memory, its model FLOPs utilization and its expert measures.

``RankResult`` and ``AnalysisResult`` hold them as ``memory``, ``efficiency`` and ``measures``; their JSON stays flat.
Each part's field names its JSON key in its metadata (``key``) where the attribute reads better without the part's
prefix (``result.memory.peak`` is the JSON's ``memory_peak``); the others are their own key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar, get_type_hints


def _key(name: str) -> dict[str, str]:
    """The field metadata that names a part's attribute's JSON key."""
    return {"key": name}


@dataclass
class MemoryParts:
    """Device memory: the peak, what it is made of, and which ops allocate it.

    Args:
        peak_bytes: ``peak_memory_bytes``: the highest memory allocated (any rank's, for a window), when profiled.
        device_bytes: ``device_memory_bytes``: the device's capacity; per rank (a window's JSON has no such key).
        by_op: ``memory_by_op``: the ops with the most self memory, ``{name, self_bytes, calls}``
            (``analysis.memory_ops``).
        peak: ``memory_peak``: ``{bytes, op, ts_ms, memory}``: the highest allocated memory (of any rank) and the op
            there.
        curve: ``memory_curve``: ``[ms, bytes]`` points of allocated memory over the window; per rank.
        categories: ``memory_categories``: ``{parameters, gradients, optimizer_state, activations, other, peak}`` in
            bytes: what the peak (of the rank with the highest peak) is made of (see ``analysis.memory_parts``); None
            without ``profile_memory`` or without our metadata.
        at_peak: ``memory_at_peak``: ``{phase, op, memory, capacity, resident}`` at that peak, with ``before_trace``
            and ``not_resident`` on a device.
        growth: ``memory_growth``: where the run's memory grew step after step (trace metadata): what the window kept
            across steps, ``{bytes_per_step, since_step, until_step, memory, steps, kept_per_step, by_op}`` (of the
            first rank with a growth; see ``analysis.memory_growth``), else None.
    """

    peak_bytes: int | None = field(default=None, metadata=_key("peak_memory_bytes"))
    device_bytes: int | None = field(default=None, metadata=_key("device_memory_bytes"))
    by_op: list[dict[str, Any]] = field(default_factory=list, metadata=_key("memory_by_op"))
    peak: dict[str, Any] | None = field(default=None, metadata=_key("memory_peak"))
    curve: list[list[float]] = field(default_factory=list, metadata=_key("memory_curve"))
    categories: dict[str, int] | None = field(default=None, metadata=_key("memory_categories"))
    at_peak: dict[str, Any] | None = field(default=None, metadata=_key("memory_at_peak"))
    growth: dict[str, Any] | None = field(default=None, metadata=_key("memory_growth"))


@dataclass
class MfuParts:
    """A window's model FLOPs utilization (``AnalysisResult.efficiency``; its ``mfu`` is the JSON's ``mfu``).

    Args:
        flops_per_step: model FLOPs of one optimizer step (from the traces' metadata), None when not known.
        achieved_tflops: ``flops_per_step`` over the median step time, in TFLOP/s per device.
        peak_tflops: the device's peak TFLOP/s for the run's compute dtype, None when not known.
        mfu: ``achieved_tflops / peak_tflops`` (model FLOPs utilization), None without both.
        mfu_gap: ``1 - mfu`` by cause: ``{input, host, sync, copy, communication, other, below_peak}`` as fractions
            (0.12 = 12 points); see ``analysis.mfu``.
        flops_source: where ``flops_per_step`` comes from (``counted with FlopCounterMode on step 0``...).
        peak_source: where ``peak_tflops`` comes from.
    """

    flops_per_step: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None
    mfu_gap: dict[str, float] | None = None
    flops_source: str = ""
    peak_source: str = ""


@dataclass
class Measures:
    """What an expert reads after the verdict: collectives, copies, launch latency, the op table, the roofline.

    A window's figures combine its ranks' (see ``analysis.rank.measures``).

    Args:
        communication: per collective and process group (summed over ranks): ``{name, group, count, bytes,
            total_ms, exposed_ms, algbw_gbps, busbw_gbps, group_size, busbw_p50_gbps}`` (see ``analysis.comms``).
        overlap_fraction: the share of collective time overlapped by compute (mean over ranks).
        copies: per copy kind and host memory kind (summed over ranks): ``{kind, memory, count, bytes, total_ms,
            gbps}`` (see ``analysis.copies``).
        launch: ``{p50_us, p95_us, launch_call_p50_us, small_kernels, small_kernel_fraction}`` (``analysis.launch``).
        op_table: self device time, self CPU time, calls and self memory of the top ops by each (``--sort``).
        notes: ``measure_notes``: what could not be measured; per rank (a window puts them in its ``notes``).
        roofline: operators against the roofline, per (op, shapes, dtype) group: ``{op, shapes, dtype, kind,
            device, count, device_time_ms, time_fraction, flops, bytes, achieved_tflops, achieved_tbps, intensity,
            peak_dtype, peak_tflops, peak_tbps, bound_tflops, bound_share, bound, kernels}`` (``analysis.roofline``).
        roofline_peaks: the peaks the rows are held to, ``{tflops, tbps, tflops_source, tbps_source, device}``.
        precision: the precision hint (fp32 matrix math without tensor cores), None when there is none: ``{kernels,
            time_ms, device_share, window_share, settings, dtype_evidence, estimated_gain, estimated_gain_ms,
            estimated_gain_fraction, basis, text, rank}`` (``analysis.precision``).
    """

    communication: list[dict[str, Any]] = field(default_factory=list)
    overlap_fraction: float | None = None
    copies: list[dict[str, Any]] = field(default_factory=list)
    launch: dict[str, Any] | None = None
    op_table: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list, metadata=_key("measure_notes"))
    roofline: list[dict[str, Any]] = field(default_factory=list)
    roofline_peaks: dict[str, Any] = field(default_factory=dict)
    precision: dict[str, Any] | None = None


Part = MemoryParts | MfuParts | Measures
_P = TypeVar("_P", MemoryParts, MfuParts, Measures)


def flat(part: Part) -> dict[str, Any]:
    """The part's JSON keys and values.

    Example:
        >>> flat(MemoryParts(peak_bytes=5))["peak_memory_bytes"]
        5
    """
    return {f.metadata.get("key", f.name): getattr(part, f.name) for f in fields(part)}


def unflat(kind: type[_P], data: dict[str, Any]) -> _P:
    """A part of ``kind`` from a flat JSON object: the keys it has (others take their defaults).

    Example:
        >>> unflat(MemoryParts, {"memory_peak": {"bytes": 5}, "verdict": "x"}).peak
        {'bytes': 5}
    """
    names = {f.metadata.get("key", f.name): f.name for f in fields(kind)}
    return kind(**{names[k]: v for k, v in data.items() if k in names})


def json_hints(kind: type[Part]) -> dict[str, Any]:
    """The type of each of a part's JSON keys (what a sidecar's values are checked against).

    Example:
        >>> json_hints(MemoryParts)["memory_curve"]
        list[list[float]]
    """
    hints = get_type_hints(kind)
    return {f.metadata.get("key", f.name): hints[f.name] for f in fields(kind)}

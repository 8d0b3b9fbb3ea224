"""MFU, and where the rest of the time goes: model FLOPs utilization and the MFU gap by cause.

The training process writes the FLOPs of one optimizer step and the device's peak FLOP/s into each window trace's
metadata (``perf_callbacks_flops``, see ``core/flops/step.py``), so a window folder carries them. From them and the
window's median step time (the ``step_time_ms`` figure)::

    achieved FLOP/s = flops_per_step / median step time
    MFU             = achieved FLOP/s / peak FLOP/s

and the gap, ``1 - MFU``, splits into the share of the window lost to each cause of the time-by-cause breakdown
(``input``, ``host``, ``sync``, ``copy``, ``communication``, ``other``) and the rest, ``below_peak``: the time the
device was busy, but ran below its peak (kernels slower than peak, FLOPs the formula does not count such as
element-wise ops and the optimizer). ``copy`` is not idle time: the device was busy copying (copies that overlapped no
kernel), so the report's line puts it apart from the idle causes. The parts are fractions (0.12 = 12 points) and sum
to ``1 - MFU``.

Example:
    >>> fields, notes = window_mfu([{"flops_per_step": 4e12, "peak_tflops": 100.0}], 100.0,
    ...                            {"input": 0.12, "communication": 0.06, "copy": 0.05})
    >>> round(fields["mfu"], 2), {k: round(v, 2) for k, v in fields["mfu_gap"].items() if v}
    (0.4, {'input': 0.12, 'copy': 0.05, 'communication': 0.06, 'below_peak': 0.37})
    >>> mfu_line(fields)
    'MFU 40%: idle 18 pts (input 12, communication 6); busy copying 5 pts; busy but below peak 37 pts'
"""

from __future__ import annotations

from math import isfinite
from typing import Any

META_KEY = "perf_callbacks_flops"
"""The trace metadata key written by the training process (``perf_callbacks.core.flops.step.META_KEY``)."""
IDLE = ("input", "host", "sync", "copy", "communication", "other")
"""The causes of the gap from the time-by-cause breakdown, in the JSON's order; ``below_peak`` follows them."""
BUSY = ("copy",)
"""The causes among ``IDLE`` in which the device was busy (copying), not idle: the report's line shows them apart."""
_LABELS = {"other": "unexplained"}
PEAK_TFLOPS_RANGE = (1e-6, 1e6)
"""Peak TFLOP/s believed (1 MFLOP/s to an exaFLOP/s, the training side's own bound): outside, the peak is set aside."""
MAX_FLOPS_PER_STEP = 1e27
"""FLOPs of one step believed (a thousand times a 2025 frontier model's): more is set aside."""
MAX_MFU = 100.0
"""An MFU above this (10,000%) comes from a wrong FLOPs count or peak: it is set aside with a note, not printed."""


def flops_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The FLOPs entry of a trace's top-level metadata, with only well-formed values; {} without one.

    Example:
        >>> flops_meta({"perf_callbacks_flops": {"flops_per_step": 1e9, "peak_tflops": "x", "note": ""}})
        {'flops_per_step': 1000000000.0, 'peak_tflops': None, 'note': '', 'source': '', 'peak_source': '', 'dtype': ''}
    """
    raw = meta.get(META_KEY)
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {
        "flops_per_step": _within(raw.get("flops_per_step"), 0.0, MAX_FLOPS_PER_STEP),
        "peak_tflops": _within(raw.get("peak_tflops"), *PEAK_TFLOPS_RANGE),
        **{k: str(raw.get(k) or "") for k in ("note", "source", "peak_source", "dtype")},
    }
    peak = raw.get("peak_tflops")
    if out["peak_tflops"] is None and _positive(peak) is not None:
        out["peak_source"] = (f"peak_tflops {peak:.3g} is outside {PEAK_TFLOPS_RANGE[0]:g} to "
                              f"{PEAK_TFLOPS_RANGE[1]:g} TFLOP/s: set aside")
    count = raw.get("flops_per_step")
    if out["flops_per_step"] is None and _positive(count) is not None:
        out["note"] = f"set aside: flops_per_step {count:.3g} is above {MAX_FLOPS_PER_STEP:g}"
    return out


def window_mfu(flops: list[dict[str, Any]], step_time_ms: float | None,
               losses: dict[str, float]) -> tuple[dict[str, Any], list[str]]:
    """The window's ``flops_per_step``, ``achieved_tflops``, ``peak_tflops``, ``mfu`` and ``mfu_gap``, and notes.

    Args:
        flops: each rank's :func:`flops_meta` ({} for a rank whose trace has none).
        step_time_ms: the window's median step time.
        losses: the window's idle shares by cause (fractions of the window, mean over ranks).
    """
    known = [f for f in flops if f]
    if not known:  # not a perf-callbacks trace, or one from before MFU: nothing to say
        return _fields(None, None, None), []
    counts = [f["flops_per_step"] for f in known if f["flops_per_step"]]
    peaks = [f["peak_tflops"] for f in known if f["peak_tflops"]]
    per_step = sum(counts) / len(counts) if counts else None
    peak = sum(peaks) / len(peaks) if peaks else None
    fields = _fields(per_step, None, peak)
    fields["flops_source"], fields["peak_source"] = _first(known, "source"), _first(known, "peak_source")
    notes = []
    if per_step is None:
        notes.append(f"MFU: FLOPs per step {_first(known, 'note') or 'not measured'}")
        return fields, notes
    if not step_time_ms:
        return fields, ["MFU: no ProfilerStep in this window, so no step time to divide the FLOPs by"]
    fields["achieved_tflops"] = per_step / (step_time_ms / 1e3) / 1e12
    if len(set(counts)) > 1:
        notes.append(f"MFU: the ranks' FLOPs per step differ ({min(counts):.3g} to {max(counts):.3g}): their mean")
    if peak is None:
        notes.append(f"MFU: not given: {_first(known, 'peak_source') or 'the peak FLOP/s is unknown'}")
        return fields, notes
    mfu = fields["achieved_tflops"] / peak
    if mfu > MAX_MFU:
        notes.append(f"MFU: set aside: {per_step:.3g} FLOPs per step in {step_time_ms:.3g} ms against a peak of "
                     f"{peak:.3g} TFLOP/s would be {mfu:.3g} times the peak; flops_per_step or peak_tflops is wrong")
        return fields, notes
    fields["mfu"] = mfu
    fields["mfu_gap"], note = mfu_gap(mfu, losses)
    return fields, notes + ([note] if note else [])


def mfu_gap(mfu: float, losses: dict[str, float]) -> tuple[dict[str, float], str]:
    """``1 - mfu`` split into each idle cause's share and ``below_peak``; a note when they cannot add up.

    The idle shares are the window's; when they exceed ``1 - mfu`` (the FLOPs or the peak are overstated, or the
    idle time falls outside the median step) they are scaled down to fit and ``below_peak`` is 0.
    """
    idle = {c: max(float(losses.get(c, 0.0)), 0.0) for c in IDLE}
    rest = max(1.0 - mfu, 0.0)
    total = sum(idle.values())
    note = ""
    if mfu > 1.0:
        note = f"MFU {mfu:.0%} is above 100%: flops_per_step or peak_tflops is overstated"
    elif total > rest + 1e-9:
        note = f"MFU {mfu:.1%} plus {total:.1%} idle exceeds 100%: flops_per_step or peak_tflops may be overstated"
    scale = rest / total if total > rest and total > 0 else 1.0
    gap = {c: share * scale for c, share in idle.items()}
    gap["below_peak"] = max(rest - sum(gap.values()), 0.0)
    return gap, note


def mfu_line(fields: dict[str, Any]) -> str | None:
    """``MFU 41%: idle 18 pts (input 12, communication 6); busy copying 3 pts; busy but below peak 38 pts``.

    None without an MFU; the copying part only when it is at least half a point.
    """
    mfu, gap = fields.get("mfu"), fields.get("mfu_gap")
    if mfu is None or not gap:
        return None
    causes = [c for c in IDLE if c not in BUSY]
    idle = sorted(((gap[c], c) for c in causes if gap.get(c, 0.0) >= 0.005), reverse=True)
    total = sum(gap.get(c, 0.0) for c in causes)
    parts = ", ".join(f"{_LABELS.get(c, c)} {share * 100:.0f}" for share, c in idle)
    inside = f" ({parts})" if parts else ""
    copying = sum(gap.get(c, 0.0) for c in BUSY)
    copies = f"; busy copying {copying * 100:.0f} pts" if copying >= 0.005 else ""
    share = f"{mfu:.0%}" if mfu >= 0.01 else f"{mfu * 100:.2g}%"
    return f"MFU {share}: idle {total * 100:.0f} pts{inside}{copies}; busy but below peak " \
           f"{gap['below_peak'] * 100:.0f} pts"


def mfu_lines(fields: dict[str, Any]) -> list[str]:
    """The report's MFU lines: the gap by cause and the figures behind it (none without FLOPs in the traces)."""
    return [line for line in (mfu_line(fields), flops_line(fields)) if line]


def flops_line(fields: dict[str, Any]) -> str | None:
    """The figures behind the MFU, with where each comes from; None when the trace carries no FLOPs."""
    per_step = fields.get("flops_per_step")
    if per_step is None:
        return None
    line = f"FLOPs per step: {_si(per_step)}FLOP ({fields.get('flops_source') or 'source unknown'})"
    if fields.get("achieved_tflops") is not None:
        line += f"; achieved {fields['achieved_tflops']:.3g} TFLOP/s"
    if fields.get("peak_tflops") is not None:
        line += f" of {fields['peak_tflops']:.4g} peak ({fields.get('peak_source') or 'source unknown'})"
    return line


def _fields(per_step: float | None, achieved: float | None, peak: float | None) -> dict[str, Any]:
    return {"flops_per_step": per_step, "achieved_tflops": achieved, "peak_tflops": peak, "mfu": None,
            "mfu_gap": None, "flops_source": "", "peak_source": ""}


def _first(known: list[dict[str, Any]], key: str) -> str:
    return next((str(f[key]) for f in known if f.get(key)), "")


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not isfinite(value) or value <= 0:
        return None
    return float(value)


def _within(value: Any, low: float, high: float) -> float | None:
    """``value`` as a float when it is a positive number in ``[low, high]``, else None."""
    number = _positive(value)
    return number if number is not None and low <= number <= high else None


def _si(value: float) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g} {prefix}"
    return f"{value:.3g} "

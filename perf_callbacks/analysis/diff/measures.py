"""``diff``'s comparison of collective and transfer bandwidth, launch latency and the memory peak.

Rates (busbw, GB/s) and latencies compare as they are; collective time compares per step (milliseconds per step and
rank), so that windows of different lengths compare.

Example:
    >>> side = {"communication": [], "copies": [], "launch": None, "memory_peak": None, "overlap_fraction": None}
    >>> compare_measures(side, side, 3, 3)["launch"]
    {}
"""

from __future__ import annotations

from html import escape
from typing import Any

from perf_callbacks.analysis.measures.text import rate, size

_LAUNCH = ("p50_us", "p95_us", "idle_p50_us", "queued_fraction", "launch_call_p50_us", "small_kernels",
           "small_kernel_fraction")


def compare_measures(base: dict[str, Any], new: dict[str, Any], base_steps: int, new_steps: int) -> dict[str, Any]:
    """Both sides' figures, matched: ``communication`` by collective and group, ``copies`` by kind and memory.

    Args:
        base: the base window's ``measures`` and ``memory`` under their JSON keys (``communication``, ``memory_peak``).
        new: the same for the new window.
        base_steps: steps summed over the base window's ranks (the per-step divisor).
        new_steps: the same for the new window.
    """
    comm = _matched(base["communication"], new["communication"], ("name", "group"),
                    lambda c, steps: {"count": c["count"], "bytes": c["bytes"], "busbw_gbps": c["busbw_gbps"],
                                      "algbw_gbps": c["algbw_gbps"], "exposed_ms_per_step": c["exposed_ms"] / steps,
                                      "total_ms_per_step": c["total_ms"] / steps},
                    max(base_steps, 1), max(new_steps, 1))
    copies = _matched(base["copies"], new["copies"], ("kind", "memory"),
                      lambda c, steps: {"count": c["count"], "bytes": c["bytes"], "gbps": c["gbps"],
                                        "ms_per_step": c["total_ms"] / steps}, max(base_steps, 1), max(new_steps, 1))
    a, b = base.get("launch") or {}, new.get("launch") or {}
    launch = {k: _delta(a.get(k), b.get(k)) for k in _LAUNCH} if a or b else {}
    peak = [(x.get("memory_peak") or {}).get("bytes") for x in (base, new)]
    return {"communication": comm, "copies": copies, "launch": launch,
            "overlap_fraction": _delta(base.get("overlap_fraction"), new.get("overlap_fraction")),
            "memory_peak_bytes": _delta(peak[0], peak[1])}


def measure_diff_lines(m: dict[str, Any]) -> list[str]:
    """The changes in bandwidth and latency, one line per collective, copy kind and launch figure."""
    if not m or not (m.get("communication") or m.get("copies") or m.get("launch")):
        return []
    lines = ["collectives, transfers and launch:"]
    for c in m["communication"]:
        group = f" ({c['group']})" if c["group"] else ""
        lines.append(_row(f"{c['name']}{group} busbw", c, "busbw_gbps", rate, _pct))
        lines.append(_row(f"{c['name']}{group} exposed ms/step", c, "exposed_ms_per_step", _ms, _plus))
    for c in m["copies"]:
        memory = f" {c['memory']}" if c["memory"] != "device" else ""
        lines.append(_row(f"{c['kind']}{memory} rate", c, "gbps", rate, _pct))
    launch = m.get("launch") or {}
    labels = (("p50_us", "launch p50"), ("p95_us", "launch p95"), ("idle_p50_us", "launch p50 on a free device"))
    for key, label in labels:
        if key in launch and (launch[key]["base"] is not None or launch[key]["new"] is not None):
            v = launch[key]
            lines.append(_line(label, _us(v["base"]), _us(v["new"]), _pct(v["base"], v["new"])))
    if launch.get("small_kernels"):
        v = launch["small_kernels"]
        lines.append(_line("kernels under 10 us", str(v["base"]), str(v["new"]), _plus(v["base"], v["new"], "")))
    peak = m.get("memory_peak_bytes") or {}
    if peak.get("base") is not None or peak.get("new") is not None:
        lines.append(_line("memory peak ([memory] events)", size(peak["base"]), size(peak["new"]), ""))
    return lines


def measure_diff_html(m: dict[str, Any]) -> str:
    """The same lines for ``diff --html``: a section with a preformatted table, or "" when there is nothing to show."""
    lines = measure_diff_lines(m)
    if not lines:
        return ""
    return "<h2>Collectives, transfers and launch</h2><pre>" + escape("\n".join(lines[1:])) + "</pre>"


def _matched(base: list[dict[str, Any]], new: list[dict[str, Any]], keys: tuple[str, str], pick: Any,
             base_steps: int, new_steps: int) -> list[dict[str, Any]]:
    a = {tuple(r[k] for k in keys): pick(r, base_steps) for r in base}
    b = {tuple(r[k] for k in keys): pick(r, new_steps) for r in new}
    return [{keys[0]: k[0], keys[1]: k[1], "base": a.get(k), "new": b.get(k)} for k in dict.fromkeys([*a, *b])]


def _delta(a: float | None, b: float | None) -> dict[str, Any]:
    return {"base": a, "new": b, "change": None if a is None or b is None else b - a}


def _row(label: str, row: dict[str, Any], key: str, fmt: Any, change: Any) -> str:
    a = row["base"][key] if row["base"] else None
    b = row["new"][key] if row["new"] else None
    return _line(label, fmt(a) if row["base"] else "absent", fmt(b) if row["new"] else "absent", change(a, b))


def _line(label: str, a: str, b: str, change: str) -> str:
    return f"  {label[:38]:38} {a:>12} -> {b:>12}   {change}"


def _pct(a: float | None, b: float | None) -> str:
    return "" if a is None or b is None or a == 0 else f"{(b - a) / a:+.1%}"


def _plus(a: float | None, b: float | None, unit: str = " ms") -> str:
    return "" if a is None or b is None else f"{b - a:+.2f}{unit}" if unit else f"{b - a:+d}"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _us(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} us"

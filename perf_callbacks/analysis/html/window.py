"""The HTML report's charts of one window: each a small function from the result to a captioned figure.

``WINDOW_CHARTS`` lists them in page order; a new chart is a function ``(AnalysisResult) -> str`` added there (it
returns ``""`` when the window has nothing to draw). Every chart draws on a :class:`~html_chart.Scale` with an axis
and units; the step bars share one scale over all ranks, and the timeline and the memory curve share one time axis.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from html import escape

from perf_callbacks.analysis.html.chart import (
    AXIS_H,
    COLORS,
    LEFT,
    Scale,
    axis,
    byte_unit,
    figure,
    grid,
    hbars,
    label,
    rect,
    scale_to,
    svg,
)
from perf_callbacks.analysis.measures.text import size
from perf_callbacks.analysis.rank.strip import WIDTH as STRIP_PX
from perf_callbacks.analysis.rank.strip import decode
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult, StepResult
from perf_callbacks.analysis.trace.timeline import CAUSES

MAX_STRIP_RECTS = 6000
"""At most about this many timeline rectangles on a page's window: with many ranks, neighbouring pixels of a strip are
merged (each merged pixel takes its most common cause), so 64 ranks stay about 1 MB and open in well under a second."""
MANY_RANKS = 8
"""Above this many ranks, the step bars show the slowest and the straggling ranks; the rank charts show them all."""
_ROW = 20
_LINES = ("#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#5d4037", "#455a64")


def drawn_causes(s: StepResult) -> dict[str, float]:
    """A step's milliseconds by cause as drawn: within the step's own time.

    The last step's causes run to the window's end, which on a device includes the queued work that finishes after
    the step's host span (the device tail); its bar is cut to the step's time, each cause in proportion.

    Example:
        >>> drawn_causes(StepResult(3, 100.0, {"compute": 120.0, "sync": 30.0}))
        {'compute': 80.0, 'sync': 20.0}
    """
    within = s.within_step()
    return {c: within[c] for c in CAUSES if within.get(c, 0.0) > 0}


def contended(s: StepResult, load: dict[str, float], fetch_wait: float) -> dict[str, float]:
    """``drawn_causes(s)`` with the time the training thread waited for a CPU drawn in its own colour.

    ``fetch_wait``: the share of the step's data wait spent waiting for a CPU (the loader block's ``wait_split``);
    the rest of the thread's wait over the window (its run-queue share of the step) is taken from the other host-side
    causes in proportion. Without a load, the step as drawn.

    Example:
        >>> contended(StepResult(1, 10.0, {"compute": 6.0, "input": 4.0}), {"wall_ms": 100.0, "run_queue_ms": 50.0},
        ...           0.5)
        {'compute': 3.0, 'input': 2.0, 'cpu_contention': 5.0}
    """
    drawn = drawn_causes(s)
    if not load or not load.get("wall_ms") or load.get("run_queue_ms") is None:
        return drawn
    total = min(sum(drawn.values()) * load["run_queue_ms"] / load["wall_ms"], sum(drawn.values()))
    taken = {"input": drawn.get("input", 0.0) * fetch_wait} if "input" in drawn else {}
    rest = {c: ms for c, ms in drawn.items() if c != "input" and c in ("compute", "host", "other")}
    left = max(total - sum(taken.values()), 0.0)
    for c, ms in rest.items():
        taken[c] = min(ms, left * ms / sum(rest.values())) if sum(rest.values()) else 0.0
    out = {c: ms - taken.get(c, 0.0) for c, ms in drawn.items()}
    out["cpu_contention"] = sum(taken.values())
    return {c: ms for c, ms in out.items() if ms > 0}


def stacked(rows: list[tuple[str, dict[str, float], str, str]], scale: Scale, kind: str, row_h: int = _ROW) -> str:
    """Rows of bars split by cause, ``(label, ms by cause, hover prefix, css of the label)``, on ``scale``."""
    body = [grid(scale, 0, len(rows) * row_h)]
    for i, (name, causes, hover, css) in enumerate(rows):
        y, x = i * row_h, scale.x0
        if row_h >= 10:
            body.append(label(LEFT - 6, y + row_h - 6, name, css=css))
        for cause, ms in causes.items():
            w = scale.length(ms)
            body.append(rect(x, y + 2, w, row_h - 4, COLORS[cause], f"{hover}{cause}: {ms:.2f} ms", css="bar"))
            x += w
        total = sum(causes.values())
        if row_h >= 10:
            body.append(label(x + 4, y + row_h - 6, f"{total:.1f} ms", anchor="start", css="value"))
    height = len(rows) * row_h
    return svg("".join(body) + axis(scale, height + 2), height + AXIS_H, kind)


def step_chart(result: AnalysisResult) -> str:
    """Time by cause of every step, every rank on one scale (the longest step over all ranks sets it)."""
    ranks = _shown_ranks(result)
    waits = {r.rank: ((r.loader or {}).get("wait_split") or {}).get("waiting_for_cpu", 0.0) for r in ranks}
    host = {r.rank: r.load if r.gpu_utilization is None else {} for r in ranks}  # on a device: the device's causes
    rows = [(f"rank {r.rank} · step {s.step}", contended(s, host[r.rank], waits[r.rank]),
             f"rank {r.rank} step {s.step} ({s.time_ms:.1f} ms): ",
             "straggler" if r.rank in result.stragglers else "")
            for r in ranks for s in r.steps]
    if not rows:
        return ""
    scale = scale_to(max(sum(c.values()) for _, c, _, _ in rows), "ms")
    left_out = len(result.ranks) - len(ranks)
    more = f" ({left_out} more ranks in Ranks side by side)" if left_out else ""
    return figure("Time by cause, per step", "One scale for every rank: a longer bar is a slower step; the widest "
                  f"colour other than green is what to fix first{more}.",
                  stacked(rows, scale, "steps"), key=legend())


def timeline_chart(result: AnalysisResult) -> str:
    """What each device did or why it idled over the window, and memory allocated, over one time axis."""
    ranks = [r for r in result.ranks if r.strip or r.memory.curve]
    if not ranks:
        return ""
    span = max([(r.end_us - r.start_us) / 1e3 for r in ranks if r.strip] +
               [p[0] for r in ranks for p in r.memory.curve])
    scale = scale_to(span, "ms")
    charts = [_strips(ranks, scale)]
    memory = _memory(ranks, scale)
    if memory:
        charts.append(memory)
    caption = "Time since the window's first step, one axis for both: gaps in red are syncs (the device waits for " \
              "the host after .item() or .cpu()), orange is data wait, yellow is the host launching too slowly; " \
              "memory that climbs step after step is a leak."
    return figure("Timeline and memory", caption, *charts, key=legend())


def ops_chart(result: AnalysisResult) -> str:
    """The ops with the most self time, as bars (long kernel names shortened, in full on hover)."""
    if not result.top_ops:
        return ""
    rows = [(o["name"], o["self_time_us"] / 1e3,
             f"{o['self_time_us'] / 1e3:.2f} ms self on {o['device']}, {o['fraction']:.1%} of op time, "
             f"{o['count']} calls") for o in result.top_ops]
    return figure("Operator time", "Self time of the top ops over all ranks: the longest bars are where the window's "
                  "time goes; hover a bar for its full name and calls.", hbars(rows, "ms", "ops"))


def launch_chart(result: AnalysisResult) -> str:
    """Launch latency: the launch call on the host, and launch-call end to kernel start (p50, p95)."""
    launch = result.measures.launch
    if not launch or launch.get("p50_us") is None:
        return ""
    rows = [("launch call (host) p50", launch.get("launch_call_p50_us")),
            ("launch to kernel start p50", launch["p50_us"]), ("launch to kernel start p95", launch.get("p95_us"))]
    bars = [(n, float(v), f"{float(v):.1f} us") for n, v in rows if v is not None]
    tiny = f"{launch.get('small_kernels', 0)} kernels under 10 us ({launch.get('small_kernel_fraction', 0.0):.0%} " \
           "of kernel time)"
    return figure("Kernel launch latency", f"A short wait to kernel start with many tiny kernels means the host "
                  f"cannot launch fast enough (CUDA graphs or torch.compile help); {tiny}.", hbars(bars, "us",
                                                                                                   "launch"))


def copies_chart(result: AnalysisResult) -> str:
    """Copy bandwidth per kind and host memory, GB/s."""
    rows = [(f"{c['kind']} {c['memory']}", float(c["gbps"]), f"{c['count']} copies, {size(c['bytes'])} in "
             f"{c['total_ms']:.2f} ms") for c in result.measures.copies if c.get("gbps")]
    if not rows:
        return ""
    return figure("Copy bandwidth", "Host-to-device copies from pageable memory run far below pinned ones: a short "
                  "HtoD pageable bar means pin_memory=True would help.", hbars(rows, "GB/s", "copies", "#0277bd"))


def comm_chart(result: AnalysisResult) -> str:
    """Bus bandwidth of each collective, GB/s."""
    rows = [(f"{c['name']} {c.get('group', '')}".strip(), float(c["busbw_gbps"]),
             f"x{c['count']}, {size(c['bytes'])} in {c['total_ms']:.2f} ms, exposed {c['exposed_ms']:.2f} ms")
            for c in result.measures.communication if c.get("busbw_gbps")]
    if not rows:
        return ""
    return figure("Collective bandwidth", "Bus bandwidth per collective: compare with the link's rate (NVLink "
                  "hundreds of GB/s, Ethernet a few); a low bar on large messages points at the network.",
                  hbars(rows, "GB/s", "collectives", "#6a1b9a"))


def mfu_chart(result: AnalysisResult) -> str:
    """The MFU gap by cause, in points of the device's peak."""
    if result.efficiency.mfu is None or not result.efficiency.mfu_gap:
        return ""
    colours = {**COLORS, "below_peak": "#b0bec5"}
    parts = {"achieved (MFU)": result.efficiency.mfu, **result.efficiency.mfu_gap}
    rows = [(n, 100 * float(v), f"{100 * float(v):.1f} points") for n, v in parts.items() if v and v > 0]
    body = hbars(rows, "%", "mfu", "#455a64", fmt="{:.1f}", fills=colours)
    return figure("MFU and its gap", "Percent of peak FLOP/s achieved, and the points lost to each cause: the "
                  "longest bar after the achieved one is the first thing to change; below_peak is time the device was "
                  "busy at less than its peak.", body)


def legend() -> str:
    """The colour of each cause."""
    items = "".join(f'<span><i class="sw" style="background:{COLORS[c]}"></i>{c}</span>'
                    for c in (*CAUSES, "cpu_contention"))
    return f'<p class="key">{items}</p>'


WINDOW_CHARTS: list[Callable[[AnalysisResult], str]] = [step_chart, timeline_chart, ops_chart, mfu_chart,
                                                         launch_chart, copies_chart, comm_chart]
"""The window's charts, in page order."""


def _shown_ranks(result: AnalysisResult) -> list[RankResult]:
    if len(result.ranks) <= MANY_RANKS:
        return result.ranks
    slowest = max(result.ranks, key=lambda r: r.step_time_ms or 0.0)
    keep = {result.ranks[0].rank, slowest.rank, *result.stragglers}
    return [r for r in result.ranks if r.rank in keep]


def _strips(ranks: list[RankResult], scale: Scale) -> str:
    """One strip per rank: each run of the strip's pixels that share a cause, with its time on hover."""
    row_h = 22 if len(ranks) <= MANY_RANKS else max(4, 240 // len(ranks))
    merge = -(-len(ranks) * STRIP_PX // MAX_STRIP_RECTS)
    body = []
    for i, r in enumerate(ranks):
        y, pixels = i * row_h, coarsen(decode(r.strip), merge)
        ms_per_px = (r.end_us - r.start_us) / 1e3 / STRIP_PX * merge
        if row_h >= 10:
            body.append(label(LEFT - 6, y + row_h - 6, f"rank {r.rank}"))
        names = r.strip_names if merge == 1 else []
        start, run = 0, 0
        for j in range(1, len(pixels) + 1):
            if j < len(pixels) and pixels[j] == pixels[start]:
                continue
            cause = pixels[start]
            if cause is not None:
                a, b = start * ms_per_px, j * ms_per_px
                top = f"; longest: {names[run]}" if run < len(names) and names[run] else ""
                body.append(rect(scale(a), y + 1, scale.length(b - a), row_h - 2, COLORS[cause],
                                 f"rank {r.rank} {cause}: {a:.2f}-{b:.2f} ms ({b - a:.2f} ms){top}"))
            start, run = j, run + 1
    height = len(ranks) * row_h
    return svg("".join(body) + axis(scale, height + 2), height + AXIS_H, "timeline")


def coarsen(pixels: list[str | None], n: int) -> list[str | None]:
    """Every ``n`` neighbouring pixels as one, with their most common cause (empty pixels count as a cause).

    Example:
        >>> coarsen(["compute", "sync", "sync", None, None, "compute"], 3)
        ['sync', None]
    """
    if n <= 1:
        return pixels
    return [Counter(pixels[i:i + n]).most_common(1)[0][0] for i in range(0, len(pixels), n)]


def _memory(ranks: list[RankResult], scale: Scale) -> str:
    """Allocated memory over the window, one line per rank, on the timeline's time scale."""
    curves = [r for r in ranks if r.memory.curve]
    if not curves:
        return ""
    top = max(b for r in curves for _, b in r.memory.curve) or 1.0
    per, unit = byte_unit(top)
    levels = scale_to(top / per, unit)
    height = 140
    lines = [grid(scale, 0, height)]
    for v in levels.ticks():
        y = height - v / levels.hi * (height - 10)
        lines.append(label(LEFT - 6, y + 4, f"{v:g} {unit}"))
    for i, r in enumerate(curves):
        xy = " ".join(f"{scale(t):.1f},{height - b / per / levels.hi * (height - 10):.1f}" for t, b in r.memory.curve)
        lines.append(f'<polyline fill="none" stroke="{_LINES[i % len(_LINES)]}" stroke-width="1.5" points="{xy}">'
                     f"<title>rank {r.rank}: peak {escape(size(max(b for _, b in r.memory.curve)))}</title>"
                     "</polyline>")
    return svg("".join(lines) + axis(scale, height + 2), height + AXIS_H, "memory")

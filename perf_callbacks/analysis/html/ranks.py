"""The HTML report's ranks side by side: time by cause per rank, a rank-by-step heatmap and collective wait.

Each chart has one row per rank on one scale, the straggler's label in red; rows get thinner with more ranks so that
64 ranks still fit a screen.
"""

from __future__ import annotations

from statistics import mean

from perf_callbacks.analysis.html.chart import (
    AXIS_H,
    LEFT,
    WIDTH,
    axis,
    figure,
    hbars,
    label,
    rect,
    scale_between,
    scale_to,
    svg,
)
from perf_callbacks.analysis.html.window import drawn_causes, legend, stacked
from perf_callbacks.analysis.results.result import AnalysisResult, RankResult
from perf_callbacks.analysis.trace.timeline import CAUSES


def rank_charts(result: AnalysisResult) -> str:
    """The ranks side by side (nothing for a single rank)."""
    ranks = [r for r in result.ranks if r.steps]
    if len(ranks) < 2:
        return ""
    marked = set(result.stragglers)
    parts = ["<h2>Ranks side by side</h2>", _by_cause(ranks, marked), _heatmap(ranks, marked), _waits(result.ranks)]
    return "".join(parts)


def mean_causes(r: RankResult) -> dict[str, float]:
    """A rank's mean step, ms by cause (as drawn: each step within its own time)."""
    per_step = [drawn_causes(s) for s in r.steps]
    return {c: sum(p.get(c, 0.0) for p in per_step) / len(per_step) for c in CAUSES
            if any(p.get(c, 0.0) > 0 for p in per_step)}


def _row_h(n: int) -> int:
    return 20 if n <= 16 else 12


def _name(r: RankResult, marked: set[int]) -> tuple[str, str]:
    return (f"rank {r.rank} straggler", "straggler") if r.rank in marked else (f"rank {r.rank}", "")


def _by_cause(ranks: list[RankResult], marked: set[int]) -> str:
    rows = [(*_name(r, marked)[:1], mean_causes(r), f"rank {r.rank} mean step: ", _name(r, marked)[1]) for r in ranks]
    scale = scale_to(max(sum(c.values()) for _, c, _, _ in rows), "ms")
    note = "the straggler (in red) reaches collectives late" if marked else "no rank straggles beyond the noise"
    return figure("Mean step by cause, per rank", f"One scale for all ranks: a rank whose bar is longer, or whose "
                  f"purple (collective wait) is shorter than the others', is the slow one; {note}.",
                  stacked(rows, scale, "ranks", _row_h(len(rows))), key=legend())


def _heatmap(ranks: list[RankResult], marked: set[int]) -> str:
    """Step time of each rank (rows) and step (columns), darker for slower, with its colour scale in ms."""
    steps = sorted({s.step for r in ranks for s in r.steps})
    times = [s.time_ms for r in ranks for s in r.steps]
    lo, hi = min(times), max(times)
    scale = scale_between(lo, hi, "ms")
    row_h, col = _row_h(len(ranks)), (WIDTH - LEFT - 70) / max(len(steps), 1)
    body = []
    for i, r in enumerate(ranks):
        y = i * row_h
        name, css = _name(r, marked)
        if row_h >= 10:
            body.append(label(LEFT - 6, y + row_h - 5, name, css=css))
        mine = {s.step: s.time_ms for s in r.steps}
        for j, step in enumerate(steps):
            if step in mine:
                body.append(rect(LEFT + j * col, y, col - 1, row_h - 1, _shade(mine[step], scale.lo, scale.hi),
                                 f"rank {r.rank} step {step}: {mine[step]:.1f} ms", css="cell"))
    height = len(ranks) * row_h
    cells = [scale.lo + (scale.hi - scale.lo) * k / 40 for k in range(40)]
    key = "".join(rect(scale(v), height + 6, (scale.x1 - scale.x0) / 40 + 0.5, 8, _shade(v, scale.lo, scale.hi),
                       f"{v:.1f} ms") for v in cells)
    body.append(key + axis(scale, height + 16))
    caption = f"Rows are ranks, columns steps {steps[0]}-{steps[-1]}: a dark row is a slow rank, a dark column a " \
              f"slow step on every rank (steps {lo:.1f}-{hi:.1f} ms)."
    return figure("Step time, rank by step", caption, svg("".join(body), height + 16 + AXIS_H, "heatmap"))


def _waits(ranks: list[RankResult]) -> str:
    rows = [(f"rank {r.rank}", sum(c["exposed_ms"] for c in r.measures.communication), "exposed collective time")
            for r in ranks if r.measures.communication]
    if not rows or not any(v > 0 for _, v, _ in rows):
        rows = [(f"rank {r.rank}", mean(s.causes_ms.get("communication", 0.0) for s in r.steps) if r.steps else 0.0,
                 "mean collective time per step") for r in ranks]
    if not any(v > 0 for _, v, _ in rows):
        return ""
    return figure("Collective wait, per rank", "The rank that waits least in collectives is the one the others wait "
                  "for; a fast rank waits longest.", hbars(rows, "ms", "waits", "#6a1b9a", row_h=_row_h(len(rows))))


def _shade(v: float, lo: float, hi: float) -> str:
    """From pale yellow (``lo``) to dark red (``hi``)."""
    t = max(0.0, min(1.0, (v - lo) / ((hi - lo) or 1.0)))
    r, g, b = (255 - 75 * t, 245 - 215 * t, 200 - 170 * t)
    return f"#{int(r):02x}{int(g):02x}{int(b):02x}"

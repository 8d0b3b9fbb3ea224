"""The diff page's charts: step time of both sides on one axis with the noise, and the change by cause.

Each is a captioned figure on a labelled axis (``html_chart``), like the report's charts.
"""

from __future__ import annotations

from html import escape

from perf_callbacks.analysis.diff.compare import DiffResult
from perf_callbacks.analysis.html.chart import (
    AXIS_H,
    COLORS,
    LEFT,
    Scale,
    axis,
    figure,
    grid,
    label,
    rect,
    scale_to,
    svg,
    value_text,
)

_ROW = 22
_SLOWER, _FASTER = "#c62828", "#2e7d32"


def beyond_noise(d: DiffResult) -> bool:
    """Whether the step-time change is beyond the noise (a significant regression or improvement)."""
    return d.outcome in ("regression", "improvement")


def step_time_chart(d: DiffResult) -> str:
    """Median step time of base and new on one axis; the spread of the steps as a whisker on each bar."""
    st = d.step_time_ms
    spreads = {k: float(v or 0.0) for k, v in (st.get("spread_ms") or {}).items()}
    scale = scale_to(max(st[k] + spreads.get(k, 0.0) / 2 for k in ("base", "new")), "ms")
    body = [grid(scale, 0, 2 * _ROW)]
    for i, side in enumerate(("base", "new")):
        y, ms, spread = i * _ROW, float(st[side]), spreads.get(side, 0.0)
        colour = "#78909c" if side == "base" else (_SLOWER if d.outcome == "regression" else
                                                   _FASTER if d.outcome == "improvement" else "#78909c")
        body.append(label(LEFT - 6, y + _ROW - 7, f"{side} (median)"))
        body.append(rect(LEFT, y + 3, scale.length(ms), _ROW - 6, colour, f"{side}: {ms:.2f} ms per step", css="bar"))
        if spread:
            x0, x1 = scale(max(ms - spread / 2, 0.0)), scale(ms + spread / 2)
            body.append(f'<line x1="{x0:.1f}" y1="{y + _ROW / 2}" x2="{x1:.1f}" y2="{y + _ROW / 2}" stroke="#000">'
                        f"<title>{escape(side)}: steps spread {spread:.2f} ms</title></line>")
        body.append(label(scale(ms) + 4 + (scale.length(spread / 2) if spread else 0), y + _ROW - 7,
                          f"{ms:.2f} ms", anchor="start", css="value"))
    mark = "beyond the noise" if beyond_noise(d) else "within the noise"
    chart = svg("".join(body) + axis(scale, 2 * _ROW + 2), 2 * _ROW + AXIS_H, f"steptime {mark.replace(' ', '-')}")
    return figure(f"Step time: {d.outcome} ({mark})", f"Both runs on one axis; the black whisker is the spread of "
                  f"each side's steps (centred on the median): a change {mark} ({st.get('noise', '')}).", chart)


def change_chart(d: DiffResult) -> str:
    """The change of each cause in ms per step, slower to the right (red) and faster to the left (green)."""
    rows = [(c, float(v["change"])) for c, v in d.causes.items() if abs(float(v.get("change") or 0.0)) > 1e-6]
    if not rows:
        return ""
    rows.sort(key=lambda cv: -abs(cv[1]))
    top = scale_to(max(abs(v) for _, v in rows), "ms").hi
    scale = Scale(-top, top, "ms")
    zero = scale(0.0)
    body = [grid(scale, 0, len(rows) * _ROW),
            f'<line x1="{zero:.1f}" y1="0" x2="{zero:.1f}" y2="{len(rows) * _ROW}" stroke="#333"/>']
    for i, (cause, ms) in enumerate(rows):
        y = i * _ROW
        name = cause
        base, new = d.causes[cause]["base"], d.causes[cause]["new"]
        x = zero if ms > 0 else zero - scale.length(-ms)
        body.append(f'<rect x="{LEFT - 16}" y="{y + 6}" width="10" height="10" fill="{COLORS.get(cause, "#999")}"/>')
        body.append(label(LEFT - 20, y + _ROW - 7, name))
        body.append(rect(x, y + 3, scale.length(abs(ms)), _ROW - 6, _SLOWER if ms > 0 else _FASTER,
                         f"{name}: {base:.2f} -> {new:.2f} ms per step ({ms:+.2f})", css="change"))
        tx = x + scale.length(abs(ms)) + 4 if ms > 0 else x - 4
        body.append(label(tx, y + _ROW - 7, f"{'+' if ms > 0 else '-'}{value_text(abs(ms))} ms",
                          anchor="start" if ms > 0 else "end", css="value"))
    chart = svg("".join(body) + axis(scale, len(rows) * _ROW + 2, "ms/step"), len(rows) * _ROW + AXIS_H, "change")
    mark = "beyond the noise" if beyond_noise(d) else "within the noise: no cause changed for sure"
    return figure("Change by cause", f"Milliseconds per step each cause gained (red, right) or lost (green, left) "
                  f"from base to new; the step time changed {mark}.", chart)

"""The HTML report's chart parts: a linear scale with round ticks, a labelled axis, bars, and a captioned figure.

Every chart of the report is an inline ``<svg class="chart">`` inside a ``<figure>`` with a one-line caption, and
every chart has an axis, ``<g class="axis" data-unit=... data-lo=... data-hi=... data-x0=... data-x1=...>``: the
unit and the value range drawn between two pixel positions, so that tests (and readers) can check that two charts
share a scale. Hand-drawn SVG (the timeline's zoom, ``html_zoom``, is the page's only script): the page stays one
file that opens offline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape

WIDTH = 960
"""Width of every chart, in pixels."""
LEFT = 170
"""Where the plotting area starts: the row labels are to its left."""
RIGHT = 70
"""Room to the right of the plotting area, for a value or a mark after the longest bar."""
AXIS_H = 30
"""Height of an axis under a chart."""
COLORS = {
    "compute": "#2e7d32",
    "copy": "#0277bd",
    "communication": "#6a1b9a",
    "input": "#ef6c00",
    "sync": "#c62828",
    "host": "#f9a825",
    "other": "#9e9e9e",
    "backlog": "#90a4ae",
    "cpu_contention": "#d81b60",
}
"""The colour of each timeline cause, in every chart."""


@dataclass(frozen=True)
class Scale:
    """Values ``[lo, hi]`` in ``unit`` drawn from pixel ``x0`` to ``x1``; ``hi`` is a round tick."""

    lo: float
    hi: float
    unit: str
    x0: float = LEFT
    x1: float = WIDTH - RIGHT

    def __call__(self, value: float) -> float:
        """The pixel of ``value``."""
        return self.x0 + (value - self.lo) / ((self.hi - self.lo) or 1.0) * (self.x1 - self.x0)

    def length(self, value: float) -> float:
        """The length in pixels of a bar of ``value``."""
        return max(value, 0.0) / ((self.hi - self.lo) or 1.0) * (self.x1 - self.x0)

    def ticks(self) -> list[float]:
        """Round values from ``lo`` to ``hi``."""
        step = _step(self.hi - self.lo)
        n = round((self.hi - self.lo) / step)
        return [self.lo + i * step for i in range(n + 1)]


def scale_to(top: float, unit: str, x0: float = LEFT, x1: float = WIDTH - RIGHT) -> Scale:
    """A scale from 0 to the first round tick at or above ``top``.

    Example:
        >>> s = scale_to(147.6, "ms")
        >>> s.hi, s.ticks()
        (150.0, [0.0, 50.0, 100.0, 150.0])
    """
    top = top if top > 0 and math.isfinite(top) else 1.0
    step = _step(top)
    return Scale(0.0, float(math.ceil(top / step - 1e-9) * step), unit, x0, x1)


def scale_between(lo: float, hi: float, unit: str, x0: float = LEFT, x1: float = WIDTH - RIGHT) -> Scale:
    """A scale from the round tick at or below ``lo`` to the one at or above ``hi`` (for a colour key).

    Example:
        >>> s = scale_between(131.0, 208.0, "ms")
        >>> s.lo, s.hi
        (120.0, 220.0)
    """
    if not hi > lo:
        return scale_to(hi, unit, x0, x1)
    step = _step(hi - lo)
    return Scale(float(math.floor(lo / step) * step), float(math.ceil(hi / step - 1e-9) * step), unit, x0, x1)


def axis(scale: Scale, y: float, label: str = "") -> str:
    """A horizontal axis at ``y``: its line, a tick and value at each round value, and the unit (or ``label``)."""
    marks = []
    for v in scale.ticks():
        x = scale(v)
        marks.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#555"/>'
                     f'<text x="{x:.1f}" y="{y + 15}" text-anchor="middle">{number(v)}</text>')
    unit = escape(label or scale.unit)
    return (f'<g class="axis" data-unit="{escape(scale.unit)}" data-lo="{scale.lo:g}" data-hi="{scale.hi:g}" '
            f'data-x0="{scale.x0:g}" data-x1="{scale.x1:g}">'
            f'<line x1="{scale.x0}" y1="{y}" x2="{scale.x1}" y2="{y}" stroke="#555"/>{"".join(marks)}'
            f'<text class="unit" x="{scale.x1 + 22:.0f}" y="{y + 15}">{unit}</text></g>')


def grid(scale: Scale, top: float, bottom: float) -> str:
    """Faint vertical lines at the ticks, behind the bars."""
    lines = "".join(f'<line x1="{scale(v):.1f}" y1="{top}" x2="{scale(v):.1f}" y2="{bottom}" stroke="#eee"/>'
                    for v in scale.ticks())
    return f'<g class="grid">{lines}</g>'


def svg(body: str, height: float, kind: str) -> str:
    """An inline chart of the page's chart width."""
    return f'<svg class="chart {kind}" width="{WIDTH}" height="{height:.0f}" viewBox="0 0 {WIDTH} {height:.0f}">' \
           f"{body}</svg>"


def figure(title: str, caption: str, *charts: str, key: str = "") -> str:
    """A chart (or several over one axis) with its title and its one-line caption: what to look for."""
    return f'<figure><h3>{escape(title)}</h3>{key}{"".join(charts)}<figcaption>{escape(caption)}</figcaption>' \
           "</figure>"


def rect(x: float, y: float, w: float, h: float, fill: str, title: str, css: str = "") -> str:
    """A bar with its hover text."""
    cls = f' class="{css}"' if css else ""
    return f'<rect{cls} x="{x:.2f}" y="{y:.1f}" width="{w:.2f}" height="{h:.1f}" fill="{fill}">' \
           f"<title>{escape(title)}</title></rect>"


def label(x: float, y: float, text: str, title: str = "", anchor: str = "end", css: str = "") -> str:
    """A text at ``(x, y)``; with ``title``, the full text on hover (for a shortened name)."""
    cls = f' class="{css}"' if css else ""
    hover = f"<title>{escape(title)}</title>" if title else ""
    return f'<text{cls} x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{hover}{escape(text)}</text>'


def hbars(rows: Iterable[tuple[str, float, str]], unit: str, kind: str, fill: str = "#1565c0",
          row_h: int = 18, fmt: str = "", fills: dict[str, str] | None = None) -> str:
    """Horizontal bars, one per ``(label, value, hover)``, on one scale from 0, with the axis under them.

    Labels longer than the label column are shortened; the full label is in the hover text. ``fills`` gives some
    rows (by label) their own colour.
    """
    rows = list(rows)
    scale = scale_to(max((v for _, v, _ in rows), default=0.0), unit)
    body = [grid(scale, 0, len(rows) * row_h)]
    for i, (name, value, hover) in enumerate(rows):
        y = i * row_h
        body.append(label(LEFT - 6, y + row_h - 5, short(name), name))
        colour = (fills or {}).get(name, fill)
        body.append(rect(LEFT, y + 2, scale.length(value), row_h - 4, colour, f"{name}: {hover}"))
        text = fmt.format(value) if fmt else value_text(value)
        body.append(label(LEFT + scale.length(value) + 4, y + row_h - 5, f"{text} {unit}", anchor="start", css="value"))
    height = len(rows) * row_h
    return svg("".join(body) + axis(scale, height + 2), height + AXIS_H, kind)


def short(name: str, limit: int = 26, px: float = LEFT - 8) -> str:
    """A long kernel or op name cut to its head and its tail, joined by an ellipsis.

    At most ``limit`` characters and ``px`` pixels at the charts' 11 px font, the width as ``text_px`` puts it (a wide
    font's), so that a label drawn to end at the plotting area never starts left of the chart.

    Example:
        >>> short("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(...)")
        'void cutlass::K…ign8>(...)'
        >>> short("aten::mm"), short("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN")
        ('aten::mm', 'nvjet_sm90_t…coopA_NTN')
    """
    if len(name) <= limit and text_px(name) <= px:
        return name
    for n in range(min(limit, len(name)) - 1, 1, -1):
        head = n * 3 // 5
        cut = name[:head] + "…" + name[len(name) - (n - head):]
        if text_px(cut) <= px:
            return cut
    return name[:1] + "…"


_EM = {**dict.fromkeys("ijl|.,:;'!", 0.32), **dict.fromkeys("ftr()[]{} -/", 0.46), **dict.fromkeys("mwMW@%", 0.98),
       **dict.fromkeys("abcdeghknopqsuvxyz0123456789_", 0.64), **dict.fromkeys("ABCDEFGHIJKLNOPQRSTUVXYZ", 0.78)}
"""Widths of characters in ems, rounded up from DejaVu Sans (one of the widest fonts a browser picks for
``sans-serif``); any other character counts as 1 em."""


def text_px(text: str, font_px: float = 11.0) -> float:
    """The width of ``text`` in pixels at ``font_px``, an upper estimate (``_EM``).

    Example:
        >>> round(text_px("aten::mm"), 1)
        54.8
    """
    return font_px * sum(_EM.get(c, 1.0) for c in text)


def byte_unit(top: float) -> tuple[float, str]:
    """The decimal unit to draw bytes up to ``top`` in, as ``(bytes per unit, unit)``: the largest unit ``top`` reaches.

    Example:
        >>> byte_unit(22.6e9), byte_unit(50.3e6), byte_unit(512)
        ((1000000000.0, 'GB'), (1000000.0, 'MB'), (1.0, 'B'))
    """
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(top) >= scale:
            return scale, unit
    return 1.0, "B"


def value_text(v: float) -> str:
    """A bar's value in three digits, without an exponent.

    Example:
        >>> value_text(17512.3), value_text(9.154), value_text(0.00258)
        ('17,512', '9.15', '0.00258')
    """
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def number(v: float) -> str:
    """A tick value without needless digits.

    Example:
        >>> number(20.0), number(0.5), number(1500.0)
        ('20', '0.5', '1500')
    """
    return f"{v:.6g}"


def _step(span: float, n: int = 6) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) giving about ``n`` ticks over ``span``."""
    raw = span / n if span > 0 else 1.0
    base = 10 ** math.floor(math.log10(raw))
    return float(next(m * base for m in (1, 2, 5, 10) if m * base >= raw))

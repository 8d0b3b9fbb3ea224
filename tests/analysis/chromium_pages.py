"""Render report pages in headless Chromium: the DOM it built, the charts in it, and the requests the page made."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND"]
"""No network: every host name resolves to nothing (and Chromium's own background fetches are turned off)."""


def chromium(page: Path, tmp: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium on ``page`` with its own profile under ``tmp``."""
    profile = tmp / f"profile-{page.stem}"
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *flags, page.as_uri()],
                          check=False, capture_output=True, text=True, timeout=120)


def dump_dom(page: Path, tmp: Path) -> str:
    """The DOM Chromium built from ``page``, serialized."""
    out = chromium(page, tmp, "--dump-dom")
    assert "</html>" in out.stdout, out.stderr[-2000:]
    return out.stdout


def page_requests(page: Path, tmp: Path) -> list[str]:
    """The URLs of the network requests the page itself made while Chromium loaded it (from Chromium's net log).

    Chromium's own background requests (not made by the page) have no ``file://`` network isolation key.
    """
    log = tmp / f"netlog-{page.stem}.json"
    chromium(page, tmp, f"--log-net-log={log}", "--dump-dom")
    doc = json.loads(log.read_text())
    start = doc["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in doc["events"]
            if e["type"] == start and "file://" in str(e.get("params", {}).get("network_isolation_key", ""))]


@dataclass
class Chart:
    """One ``<svg class="chart KIND">``: its axes' attributes, its bars and its texts."""

    kind: str
    axes: list[dict[str, str]] = field(default_factory=list)
    rects: list[dict[str, str]] = field(default_factory=list)
    texts: list[tuple[dict[str, str], str]] = field(default_factory=list)
    polylines: list[dict[str, str]] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)

    def rows(self, css: str = "bar") -> dict[float, float]:
        """Total width of the bars (``rect.css``) at each y: one entry per row of a bar chart."""
        out: dict[float, float] = {}
        for r in self.rects:
            if css in r.get("class", "").split():
                out[float(r["y"])] = out.get(float(r["y"]), 0.0) + float(r["width"])
        return out


class _Charts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.charts: list[Chart] = []
        self.captions: list[str] = []
        self._in: Chart | None = None
        self._text: dict[str, str] | None = None
        self._caption: str | None = None
        self._depth = 0  # inside a <title>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        if tag == "svg" and "chart" in classes:
            self._in = Chart(" ".join(c for c in classes if c != "chart"))
            self.charts.append(self._in)
        elif tag == "figcaption":
            self._caption = ""
        elif self._in is not None:
            if tag == "g" and "axis" in classes:
                self._in.axes.append(a)
            elif tag == "rect":
                self._in.rects.append(a)
            elif tag == "polyline":
                self._in.polylines.append(a)
            elif tag == "text":
                self._text = a
                self._in.texts.append((a, ""))
            elif tag == "title":
                self._in.titles.append("")
                self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._in = None
        elif tag == "figcaption" and self._caption is not None:
            self.captions.append(self._caption.strip())
            self._caption = None
        elif tag == "text":
            self._text = None
        elif tag == "title" and self._in is not None:
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._caption is not None:
            self._caption += data
        if self._in is not None and self._depth > 0:
            self._in.titles[-1] += data
        elif self._in is not None and self._text is not None:
            attrs, text = self._in.texts[-1]
            self._in.texts[-1] = (attrs, text + data)


def charts(dom: str) -> tuple[list[Chart], list[str]]:
    """The charts of a page and its figure captions."""
    parser = _Charts()
    parser.feed(dom)
    return parser.charts, parser.captions

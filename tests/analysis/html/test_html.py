"""The HTML page is self-contained, and headless Chromium renders it to a screenshot that is not blank."""

from __future__ import annotations

import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from perf_callbacks.analysis import analyze, render_html
from perf_callbacks.cli import main
from tests.analysis.conftest import fixture_trace

CHROMIUM = Path("/usr/bin/chromium")


def test_page_is_self_contained() -> None:
    page = render_html(analyze(fixture_trace("sync_bound")))
    assert page.count("<script") == page.count("<script>") == 1  # the timeline's zoom, inline: no src
    assert "http" not in page
    assert "<link" not in page
    assert page.count('<svg class="chart steps"') == page.count('<svg class="chart timeline"') == 1
    assert page.count('<svg class="chart memory"') == 1  # on the timeline's time axis
    assert "aten::mm" in page
    assert "sync_bound" in page


def _png_colours(path: Path) -> set[bytes]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG with zlib only and return its distinct pixel colours."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8
            assert ctype in (2, 6)
            channels = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, prev = zlib.decompress(idat), width * channels, bytearray(width * channels)
    colours: set[bytes] = set()
    for y in range(height):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            line[i] = (line[i] + [0, a, b, (a + b) // 2, _paeth(a, b, c)][ftype]) & 0xFF
        colours.update(bytes(line[i : i + 3]) for i in range(0, stride, channels * 7))
        prev = line
    return colours


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium package")
def test_screenshot_is_not_blank(tmp_path: Path) -> None:
    page, shot = tmp_path / "report.html", tmp_path / "shot.png"
    assert main(["report", str(fixture_trace("sync_bound")), "--html", str(page)]) == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,900"]
    subprocess.run([str(CHROMIUM), *flags, page.as_uri()], check=False, capture_output=True, timeout=120)
    assert shot.exists()
    colours = _png_colours(shot)
    assert len(colours) > 5
    assert bytes.fromhex("2e7d32") in colours  # the compute green of the bars


def test_the_page_is_the_same_from_sidecars_and_from_traces(tmp_path: Path) -> None:
    """``report RUN --html`` reads the sidecars: its page has the timeline strip that parsing the trace draws."""
    from perf_callbacks.analysis.sidecar import write_sidecar

    window = tmp_path / "run" / "window-000004-000006"
    window.mkdir(parents=True)
    trace = window / "rank0.pt.trace.json.gz"
    trace.write_bytes(fixture_trace("sync_bound").read_bytes())
    write_sidecar(trace)
    pages = {}
    for how in ("sidecars", "traces"):
        page = tmp_path / f"{how}.html"
        assert main(["report", str(tmp_path / "run"), "--html", str(page)] + (["--no-sidecars"] * (how == "traces"))) == 0
        pages[how] = page.read_text()
    assert '<svg class="chart timeline"' in pages["sidecars"]
    assert pages["sidecars"] == pages["traces"]

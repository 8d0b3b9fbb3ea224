"""How fast the HTML report opens in headless Chromium, and how large it is.

For the largest H200 fixture (the 65 MB input_bound trace) and for a synthetic 64-rank window whose timeline strips
alternate cause on every pixel (the most SVG a window can hold), it renders the page and measures, over ``--repeat``
runs, the page's own load time (a copy of the page with one added line of script reads ``performance.now()`` at the
load event: navigation start to fully parsed, styled and laid out) and the wall time of ``chromium --headless
--dump-dom`` less that of a blank page (the browser's start-up). Prints a table and writes JSON.

    python benchmarks/html_speed.py [TRACE] [--out benchmarks/html_speed.json] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT = REPO / "tests" / "data" / "gpu_traces" / "input_bound.pt.trace.json.gz"
CHROMIUM = Path("/usr/bin/chromium")
_PROBE = '<script>addEventListener("load",()=>{document.title="loaded "+performance.now().toFixed(1)})</script>'
_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--host-resolver-rules=MAP * ~NOTFOUND"]


def many_ranks_page() -> str:
    """64 ranks of 8 steps, every strip alternating cause on every pixel."""
    from perf_callbacks.analysis import render_html
    from tests.analysis.synthetic_results import result

    r = result([[100.0 + (20.0 if n == 5 else 0.0)] * 8 for n in range(64)], stragglers=(5,))
    for rank in r.ranks:
        rank.strip = "1c1s" * 500
    return render_html(r)


def load_ms(page: str, tmp: Path, name: str) -> tuple[float, float]:
    """The page's load time in ms (its own clock), and the wall seconds of ``--dump-dom``."""
    probe = tmp / f"{name}.html"
    probe.write_text(page.replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    t = time.perf_counter()
    out = subprocess.run([str(CHROMIUM), *_FLAGS, f"--user-data-dir={tmp / 'profile'}", "--dump-dom",
                          probe.as_uri()], capture_output=True, text=True, timeout=120, check=False).stdout
    wall = time.perf_counter() - t
    found = re.search(r"<title>loaded ([0-9.]+)</title>", out)
    if not found:
        raise RuntimeError(f"the page did not load: {out[:300]!r}")
    return float(found.group(1)), wall


def measure(name: str, page: str, tmp: Path, repeat: int, blank_s: float) -> dict[str, float | str]:
    runs = [load_ms(page, tmp, name) for _ in range(repeat)]
    return {"page": name, "bytes": len(page.encode()), "load_ms_median": statistics.median(r[0] for r in runs),
            "load_ms_max": max(r[0] for r in runs),
            "dump_dom_s_over_blank": statistics.median(r[1] for r in runs) - blank_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "html_speed.json")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not CHROMIUM.exists():
        print(f"html_speed: needs Chromium at {CHROMIUM}", file=sys.stderr)
        return 2
    from perf_callbacks.analysis import analyze, render_html

    t = time.perf_counter()
    result = analyze(args.trace)
    analyse_s = time.perf_counter() - t
    t = time.perf_counter()
    page = render_html(result)
    render_s = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        blank = [load_ms("<html><body></body></html>", tmp, "blank")[1] for _ in range(args.repeat)]
        blank_s = statistics.median(blank)
        rows = [measure(args.trace.name, page, tmp, args.repeat, blank_s),
                measure("64 ranks, alternating strips", many_ranks_page(), tmp, args.repeat, blank_s)]
    report = {"trace": str(args.trace), "analyse_s": analyse_s, "render_s": render_s,
              "blank_dump_dom_s": blank_s, "pages": rows}
    for row in rows:
        print(f"{row['page']:<40} {row['bytes'] / 1e6:6.2f} MB  load {row['load_ms_median']:7.1f} ms (max "
              f"{row['load_ms_max']:.1f})  dump-dom {row['dump_dom_s_over_blank']:+.2f} s over a blank page")
    print(f"analyse {analyse_s:.2f} s, render {render_s * 1e3:.1f} ms; blank page dump-dom {blank_s:.2f} s")
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

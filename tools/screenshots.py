"""Screenshots of the HTML report for the docs: four H200 fixtures, a run of 3 windows, a 2-rank gloo run, a diff.

    python tools/screenshots.py [OUT_DIR] [--gloo WINDOW]

Renders each page with ``perf_callbacks.analysis`` and photographs it with headless Chromium (no network) into
``OUT_DIR`` (default ``docs/img``). ``--gloo`` takes a window folder of 2-rank gloo traces; without it, one is
recorded with ``tests/analysis/gloo_traces.py`` (two CPU processes, rank 1 sleeping before each all_reduce).
``tests/analysis/html/test_screenshots.py`` runs this script, so the pictures in the docs are always of the current
page.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FIXTURES = REPO / "tests" / "data" / "gpu_traces"
H200 = ("compute_bound", "input_bound", "launch_bound_tiny_kernels", "sync_bound")
CHROMIUM = Path("/usr/bin/chromium")
WIDTH, HEIGHT = 1040, 2300
_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND"]


def pages(gloo: Path, run: Path) -> dict[str, str]:
    """Each screenshot's name and its page; ``run`` is a run folder of several windows."""
    from perf_callbacks.analysis import analyze, compare, render_html
    from perf_callbacks.analysis.html.diff_page import render_diff_html

    fixtures = FIXTURES.relative_to(REPO)  # the page's title names the fixture, not where the repository is
    results = {name: analyze(fixtures / f"{name}.pt.trace.json.gz", sidecars=False) for name in H200}
    out = {f"report_{name}": render_html(r) for name, r in results.items()}
    out["report_gloo_2_ranks"] = render_html(analyze(gloo, sidecars=False))
    out["report_run_3_windows"] = render_html(analyze(run, sidecars=False))
    out["diff_compute_vs_input"] = render_diff_html(compare(results["compute_bound"], results["input_bound"]))
    return out


def shoot(html: str, png: Path, tmp: Path, height: int = HEIGHT) -> None:
    """Photograph ``html`` into ``png`` (the top ``height`` pixels of the page)."""
    page = tmp / f"{png.stem}.html"
    page.write_text(html, encoding="utf-8")
    subprocess.run([str(CHROMIUM), *_FLAGS, f"--user-data-dir={tmp / 'profile'}", f"--screenshot={png}",
                    f"--window-size={WIDTH},{height}", page.as_uri()], capture_output=True, timeout=120, check=False)
    if not png.exists():
        raise RuntimeError(f"Chromium wrote no screenshot of {page}")


def three_windows(tmp: Path) -> Path:
    """A run folder whose windows are three of the fixtures (sync-bound, then host-bound, then compute-bound)."""
    run = tmp / "run"
    for first, name in ((4, "sync_bound"), (20, "launch_bound_tiny_kernels"), (40, "compute_bound")):
        window = run / f"window-{first:06d}-{first + 2:06d}"
        window.mkdir(parents=True)
        shutil.copy(FIXTURES / f"{name}.pt.trace.json.gz", window / "rank0.pt.trace.json.gz")
    return run


def record_gloo(tmp: Path) -> Path:
    """A real 2-rank gloo window (4 steps; rank 1 sleeps 100 ms before its all_reduce)."""
    window = tmp / "gloo" / "window-000002-000005"
    subprocess.run([sys.executable, "-m", "tests.analysis.gloo_traces", str(window), "0.1", "4"], cwd=REPO,
                   check=True, timeout=300)
    return window


def main(argv: list[str] | None = None) -> int:
    """Write the screenshots; 2 without Chromium."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=REPO / "docs" / "img")
    parser.add_argument("--gloo", type=Path, help="a window folder of 2-rank gloo traces (default: record one)")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    gloo_given = args.gloo.resolve() if args.gloo else None
    os.chdir(REPO)
    if not CHROMIUM.exists():
        print(f"screenshots: needs Chromium at {CHROMIUM}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        gloo = gloo_given or record_gloo(tmp)
        for name, html in pages(gloo, three_windows(tmp)).items():
            png = args.out / f"{name}.png"
            png.unlink(missing_ok=True)
            shoot(html, png, tmp)
            print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())

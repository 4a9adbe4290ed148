"""Screenshots of each notebook in JupyterLab after running it, for docs/screenshots/ (small PNGs).

    python tools/notebook_screenshots.py [--out docs/screenshots] [name ...]

Runs every cell in headless Debian chromium (as tests/test_browser.py does), scrolls to the first plotly
figure (or the widget) and saves the viewport. Without a GPU the notebooks run their CPU sizes and a tiny
random pair stands in for the embedded one.
"""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.lab_browser import browser_page, copy_notebooks, jupyter_lab, missing, open_notebook, run_all  # noqa: E402

# The report is read as a page, not in JupyterLab: tools/report_screenshots.py shoots it.
NAMES = ["quickstart", "attention_splits", "gemms", "step_profile", "acceptance"]
# What each screenshot shows: the n-th plotly figure (0-based), or the widget.
FOCUS = {"quickstart": 0, "attention_splits": "widget", "gemms": 0, "step_profile": 0, "acceptance": 1}


def shoot(page, name, out):
    focus = FOCUS.get(name, 0)
    target = page.locator(".widget-slider").first if focus == "widget" else page.locator(".js-plotly-plot").nth(focus)
    target.scroll_into_view_if_needed()
    target.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.evaluate("() => document.querySelector('.jp-WindowedPanel-outer').scrollBy(0, -30)")
    page.wait_for_timeout(800)
    path = Path(out) / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=NAMES)
    ap.add_argument("--out", default="docs/screenshots")
    args = ap.parse_args(argv)
    reason = missing()
    if reason:
        sys.exit(reason)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    root = copy_notebooks(tempfile.mkdtemp(prefix="screenshots-"), args.names)
    with jupyter_lab(root) as (base, token), browser_page(width=1100, height=760) as page:
        for name in args.names:
            open_notebook(page, base, token, name)
            run_all(page, timeout_ms=900_000)
            path = shoot(page, name, args.out)
            print(f"{path}: {path.stat().st_size / 1e3:.0f} kB")
            page.evaluate("() => window.jupyterapp.commands.execute('kernelmenu:shutdown')")
    return 0


if __name__ == "__main__":
    sys.exit(main())

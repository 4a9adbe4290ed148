"""Screenshots of a report page (reports/report.html) for docs/screenshots/: its opening (title and
findings) and the chart of this project beside its peers.

    python tools/report_screenshots.py [--html reports/report.html] [--out docs/screenshots] [--suffix cpu]

Opens the page from disk in headless Debian chromium (as tests/test_browser.py does). Run it after
`make report` on the machine whose report it shows: `--suffix cpu` here, `--suffix h200` on the H200.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.lab_browser import browser_page, missing  # noqa: E402

PEERS = "fraction of each GPU's memory bandwidth"


def shoot(page, out, name):
    path = Path(out) / name
    page.wait_for_timeout(600)
    page.screenshot(path=str(path))
    print(f"{path}: {path.stat().st_size / 1e3:.0f} kB")
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--html", default="reports/report.html")
    ap.add_argument("--out", default="docs/screenshots")
    ap.add_argument("--suffix", default="cpu", help="names the files report-<suffix>.png, report-peers-<suffix>.png")
    args = ap.parse_args(argv)
    reason = missing()
    if reason:
        sys.exit(reason)
    html = Path(args.html).resolve()
    if not html.is_file():
        sys.exit(f"no report at {html}: run `make report` first")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with browser_page(width=1200, height=900) as page:
        page.goto(html.as_uri())
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length > 3")
        shoot(page, args.out, f"report-{args.suffix}.png")
        page.evaluate(f"""() => {{
            const plot = [...document.querySelectorAll('.js-plotly-plot')]
                .find(p => (p.layout.title.text || '').includes("{PEERS}"));
            plot.scrollIntoView({{block: 'start'}});
            window.scrollBy(0, -20);
        }}""")
        shoot(page, args.out, f"report-peers-{args.suffix}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""JupyterLab in a real browser (Playwright driving Debian's chromium): the attention_splits notebook runs,
and dragging the split slider re-times the kernel and redraws the plotly figure."""

import json

import pytest

from tests.lab_browser import browser_page, copy_notebooks, jupyter_lab, missing, open_notebook, run_all

pytestmark = pytest.mark.slow

REASON = missing()

PLOT_Y = "() => JSON.stringify(document.querySelector('.js-plotly-plot').data.map(t => t.y))"


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_split_slider_drag_redraws_the_live_figure(tmp_path):
    root = copy_notebooks(tmp_path, ["attention_splits"])
    with jupyter_lab(root) as (base, token), browser_page() as page:
        open_notebook(page, base, token, "attention_splits")
        run_all(page)
        handle = page.locator(".widget-slider .noUi-handle").first
        handle.scroll_into_view_if_needed()
        # the output's plotly renderer loads asynchronously: wait for its first trace
        page.wait_for_function("() => { const p = document.querySelector('.js-plotly-plot');"
                               " return p && p.data && p.data.length > 0 && p.data[0].y"
                               " && p.data[0].y.length > 0; }", timeout=120_000)
        before = page.evaluate(PLOT_Y)
        box = handle.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x - 150, y, steps=8)  # towards fewer splits
        page.mouse.up()
        page.wait_for_function(f"b => ({PLOT_Y})() !== b", arg=before, timeout=120_000)
        after = json.loads(page.evaluate(PLOT_Y))
        assert len(after[0]) == len(json.loads(before)[0]) + 1  # one more split count timed
        assert "splits →" in page.inner_text(".js-plotly-plot")


REPORT_CHECKS = """() => {
    const plots = [...document.querySelectorAll('.js-plotly-plot')];
    const peers = plots.find(p => (p.layout.title.text || '').includes("fraction of each GPU's memory bandwidth"));
    const ours = peers ? peers._fullData.find(t => t.name.startsWith('this project')) : null;
    return {
        headings: [...document.querySelectorAll('h2')].map(h => h.textContent.replace('¶', '').trim()),
        plots: plots.length,
        drawn: plots.filter(p => p.querySelector('.main-svg')).length,
        ours: ours ? Array.from(ours.y).filter(v => v !== null && !Number.isNaN(v)).length : 0,
        code: document.querySelectorAll('.jp-CodeMirrorEditor, .jp-InputPrompt').length,
        stderr: document.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]').length,
        firstText: document.body.innerText.indexOf('Findings') < document.body.innerText.indexOf('This run'),
    };
}"""


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_the_report_page_reads_as_a_review(tmp_path):
    """The report's HTML in chromium, opened from disk with no network: the findings come first, every
    figure draws, the peers chart has this project's bars, and there is no code and no stderr box."""
    from bench import report

    report.main(["--out", str(tmp_path), "--recorded"])
    with browser_page() as page:
        asked = []
        page.on("request", lambda r: asked.append(r.url))
        page.goto((tmp_path / "report.html").as_uri())
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length > 3")
        found = page.evaluate(REPORT_CHECKS)
    assert found["headings"][0] == "Findings" and found["firstText"]
    assert found["plots"] >= 4 and found["drawn"] == found["plots"]
    assert found["ours"] >= 6  # this project's recorded bars: 1k edit/explain and 8k edit, BF16 and INT8
    assert found["code"] == 0 and found["stderr"] == 0
    assert [u for u in asked if not u.startswith(("file:", "data:"))] == []  # the page fetches nothing

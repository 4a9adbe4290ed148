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

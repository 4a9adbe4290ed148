"""The notebooks: stored clean and thin, executed top to bottom by papermill with tiny CPU parameters,
the split explorer driven headless, and `bench.report`'s HTML carrying rendered plotly figures."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("papermill")
pytest.importorskip("ipykernel")
pytest.importorskip("ipywidgets")

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
RESULTS = REPO / "bench" / "results"
REFERENCE = REPO / "bench" / "ref" / "reference.csv"
NAMES = [p.stem for p in NOTEBOOKS]
MAX_CELL_LINES = 15


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    """A tiny random target + 2-layer drafter whose context holds the 1k prompts."""
    from tileinfer_profiling.pair import write_stand_in
    return write_stand_in(tmp_path_factory.mktemp("pair"))


def _execute(name, tmp_path, **params):
    import papermill

    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    os.environ["PYTHONPATH"] = path  # the kernel imports this checkout's packages
    out = tmp_path / f"{name}.ipynb"
    papermill.execute_notebook(str(REPO / "notebooks" / f"{name}.ipynb"), str(out), parameters=params,
                               kernel_name="python3", cwd=str(REPO / "notebooks"), progress_bar=False,
                               execution_timeout=600)
    return nbformat.read(str(out), as_version=4)


def _outputs(book, mime):
    return [o["data"][mime] for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if mime in o.get("data", {})]


def test_all_notebooks_are_present():
    assert set(NAMES) == {"quickstart", "attention_splits", "gemms", "step_profile", "acceptance", "report"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NAMES)
def test_notebook_is_stored_clean_and_thin(path):
    book = nbformat.read(str(path), as_version=4)
    nbformat.validate(book)
    assert book.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in book.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "store notebooks without outputs"
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "one cell tagged `parameters` for papermill"
    long = [c.source.splitlines()[0] for c in code if len(c.source.splitlines()) > MAX_CELL_LINES]
    assert not long, f"cells longer than {MAX_CELL_LINES} lines belong in the package: {long}"
    assert "plotly_mimetype+notebook" in code[0].source  # nbconvert keeps the figures
    assert any(c.cell_type == "markdown" for c in book.cells)


# Tiny parameters: every notebook runs top to bottom on a CPU in well under a minute.
CPU_PARAMS = {
    "quickstart": dict(max_new_tokens=4),
    "attention_splits": dict(kv_len=128),
    "gemms": dict(ms=[1]),
    "step_profile": dict(new_tokens=3),
    "acceptance": dict(points=["1k", "8k"], tasks=["edit"], new_tokens=3),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CPU_PARAMS))
def test_notebook_executes_on_cpu(name, tiny_pair, tmp_path):
    params = dict(CPU_PARAMS[name])
    if name in ("quickstart", "step_profile", "acceptance"):
        params |= dict(model=tiny_pair[0], draft=tiny_pair[1])
    book = _execute(name, tmp_path, **params)
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert _outputs(book, "application/vnd.plotly.v1+json")
    text = "\n".join(map(str, _outputs(book, "text/markdown")))
    if not __import__("torch").cuda.is_available():
        assert "CPU timing" in text  # says at the top that timings are CPU timings
    if name == "acceptance":
        assert "['1k']" in text  # 8k does not fit the tiny model's context and is left out
    if name == "attention_splits":
        assert _outputs(book, "application/vnd.jupyter.widget-view+json")


def test_split_explorer_slider_retimes_and_redraws():
    from tileinfer_profiling.split_explorer import SplitExplorer

    explorer = SplitExplorer(kv_len=64, num_splits=1, max_kv_len=128)
    before = explorer.figure.data[0].y
    assert len(before) == 1 and before[0] > 0 and explorer.figure.data[2].y[0] > 0  # live point and SDPA
    explorer.split_slider.value = 2  # what dragging the slider does
    assert explorer.figure.data[0].x == (1, 2) and len(explorer.figure.data[0].y) == 2
    assert explorer.figure.data[1].x == (2,) and explorer.figure.data[1].y[0] == explorer.measured[(64, 1)][2]
    explorer.kv_slider.value = 128  # a new cache length starts a new curve
    assert explorer.figure.data[0].x == (2,) and (128, 1) in explorer.sdpa_us
    assert "2 splits" in explorer.figure.layout.title.text
    explorer.q_slider.value = 2
    assert set(explorer.measured) == {(64, 1), (128, 1), (128, 2)}
    drawn = explorer.live_view.outputs[-1]["data"]["application/vnd.plotly.v1+json"]
    assert drawn["data"][0]["y"] == list(explorer.figure.data[0].y)  # the view shows the latest timing
    json.dumps(explorer.live_view.outputs)  # widget state travels as JSON


def test_split_explorer_shows_the_recorded_curves():
    from tileinfer_profiling import recorded
    from tileinfer_profiling.split_explorer import SplitExplorer

    sweep = recorded.attention(RESULTS / "attention_h200.csv")
    explorer = SplitExplorer(kv_len=64, max_kv_len=128, sweep=sweep, measure_now=False)
    names = [t.name for t in explorer.sweep_figure.data]
    assert any(n.startswith("ours kv 8192") for n in names) and any(n.startswith("SDPA") for n in names)
    shown = explorer.widget.children[-1].children[1].outputs[0]["data"]["application/vnd.plotly.v1+json"]
    assert [t["name"] for t in shown["data"]] == names
    assert explorer.live_view.outputs  # the empty live figure is drawn without a timing


def test_recorded_results_in_sweep_form():
    from tileinfer_profiling import best_splits, load_reference, recorded
    from tileinfer_profiling.compare import reference_tokens_per_step

    attention = recorded.attention(RESULTS / "attention_h200.csv")
    assert {"ours", "sdpa"} == set(attention["impl"]) and (attention["gpu"] == "NVIDIA H200").all()
    best = best_splits(attention)
    assert (best["vs_sdpa"] > 0).all() and set(best["kv_len"]) >= {1024, 8192, 32768}
    gemms = recorded.gemms(RESULTS / "gemm_h200.csv")
    assert not gemms.duplicated(["shape", "m", "weights", "impl"]).any()
    assert {"ours", "cublas"} <= set(gemms["impl"]) and (gemms["floor_us"] > 0).all()
    assert len(reference_tokens_per_step(load_reference(REFERENCE))) >= 16


@pytest.mark.slow
def test_report_writes_a_page_without_code_that_opens_with_its_findings(tmp_path, capsys, monkeypatch):
    """The report as a GPU runs it (a random-weight pair of the given shapes, written once, with the
    comparison's tokens per step replayed, beside the embedded pair's real acceptance), at the tiny preset."""
    from bench import report

    monkeypatch.setenv("TILEINFER_CACHE", str(tmp_path / "cache"))
    report.main(["--out", str(tmp_path), "--shaped", "tiny", "--new-tokens", "3", "--acceptance-tokens", "3"])
    printed = capsys.readouterr()
    assert str(tmp_path / "report.html") in printed.out and "acceptance: tokens per step, 1k edit" in printed.out
    assert "report: 100%" in printed.err and "USDT" not in printed.err and "IPKernelApp" not in printed.err
    assert (tmp_path / "cache" / "random" / "tiny" / "target" / "config.json").is_file()
    book = nbformat.read(str(tmp_path / "report.ipynb"), as_version=4)
    assert len(_outputs(book, "application/vnd.plotly.v1+json")) >= 10
    html = (tmp_path / "report.html").read_text()
    assert html.count("Plotly.newPlot") >= 10 and html.count("plotly.js v") == 1  # plotly.js once: no network
    assert 'class="jp-CodeMirrorEditor' not in html and "from tileinfer_profiling" not in html  # no code
    assert 'data-mime-type="application/vnd.jupyter.stderr"' not in html and "USDT" not in html
    assert html.index("Findings") < html.index("This run") < html.index("Against the peers")
    assert "replays 7.1 tokens per step" in html and "random weights" in html and "git revision" in html
    assert "this project · NVIDIA H200" in html and "embedded toy pair" in html
    assert "Every Qwen3 shape at 1k" in html and "qwen3-0.6b" in html  # the recorded model sizes
    assert "T = 0, 0.6, 1.0 (recorded on the H200)" in html and "Acceptance by temperature, this run" in html
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert "DFlash: tokens per step (replayed 7.1)" in set(summary["figure"])

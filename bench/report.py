"""`python -m bench.report --out reports`: execute notebooks/report.ipynb with papermill and write
reports/report.ipynb and a self-contained reports/report.html (plotly.js inside), then print the paths
and the run's summary table.

Without a GPU the notebook gets small parameters and finishes in a few minutes on two CPU cores; without
the embedded default pair a tiny random pair stands in (the report says so).
"""

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "notebooks" / "report.ipynb"
RESULTS = REPO / "bench" / "results"
REFERENCE = REPO / "bench" / "ref" / "reference.csv"


def parameters(model=None, draft=None, weights="bf16", live=True, new_tokens=None, points=None, gpu=None):
    """The notebook's parameters: what was given, and small CPU sizes when there is no GPU. model None is
    the embedded default pair (the notebook puts a tiny random pair in its place while it is missing)."""
    import torch

    gpu = torch.cuda.is_available() if gpu is None else gpu
    params = {"model": model, "draft": draft, "weights": weights, "live": live,
              "new_tokens": new_tokens or (128 if gpu else 32), "points": points or (["1k", "8k"] if gpu else ["1k"]),
              "results": str(RESULTS), "reference": str(REFERENCE)}
    return params


def _kernel_env():
    """The kernel must import this checkout's packages whether or not they are pip-installed."""
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), path) if p)


def to_html(notebook_path, html_path):
    """nbconvert HTML of an executed notebook; plotly figures are inline (their notebook-renderer output)."""
    import nbformat
    from nbconvert import HTMLExporter

    book = nbformat.read(str(notebook_path), as_version=4)
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(book)
    Path(html_path).write_text(body, encoding="utf-8")
    return html_path


def run(out="reports", timeout_s=1800, **kwargs):
    """Execute the report; returns (notebook path, html path, summary DataFrame or None)."""
    import pandas as pd
    import papermill

    from tileinfer.errors import ConfigError

    try:
        import ipykernel  # noqa: F401  (papermill's "python3" kernel is this environment's ipykernel)
    except ImportError as e:
        raise ConfigError("the report needs ipykernel in this environment: run `make env-notebooks` "
                          "or `pip install -e .[notebooks]`") from e
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    params = parameters(**kwargs)
    params["summary_path"] = str(out / "summary.csv")
    _kernel_env()
    notebook_out, html_out = out / "report.ipynb", out / "report.html"
    papermill.execute_notebook(str(NOTEBOOK), str(notebook_out), parameters=params, kernel_name="python3",
                               cwd=str(NOTEBOOK.parent), execution_timeout=timeout_s, progress_bar=False)
    to_html(notebook_out, html_out)
    summary_path = Path(params["summary_path"])
    summary = pd.read_csv(summary_path, dtype=str, keep_default_na=False) if summary_path.is_file() else None
    return notebook_out, html_out, summary


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="reports", help="output directory (default: reports)")
    ap.add_argument("--model", help="target checkpoint (default: the embedded pair, or a tiny random stand-in)")
    ap.add_argument("--draft", help="DFlash drafter checkpoint (default: the pair's)")
    ap.add_argument("--weights", default="bf16", choices=["bf16", "int8"])
    ap.add_argument("--new-tokens", type=int, help="tokens per generation (default: 128 on a GPU, 32 on a CPU)")
    ap.add_argument("--points", help="acceptance points, comma-separated: 1k,8k (default: 1k,8k on a GPU, 1k on a CPU)")
    ap.add_argument("--recorded", action="store_true", help="no live measurements: recorded results only")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    notebook, html, summary = run(args.out, model=args.model, draft=args.draft, weights=args.weights,
                                  live=not args.recorded, new_tokens=args.new_tokens,
                                  points=args.points.split(",") if args.points else None)
    print(f"report notebook: {notebook}")
    print(f"report HTML:     {html} ({html.stat().st_size / 1e6:.1f} MB, self-contained)")
    if summary is not None:
        print(summary.to_string(index=False))
    print(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

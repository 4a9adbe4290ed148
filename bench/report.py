"""`python -m bench.report --out reports`: execute notebooks/report.ipynb with papermill (a progress bar
per cell, with its ETA) and write reports/report.ipynb, a self-contained reports/report.html (no code,
the findings first, plotly.js once inside) and reports/summary.csv, then print the paths and the summary.

Without a GPU the notebook times the embedded toy pair at small sizes and finishes in one to two minutes
on two CPU cores. On a GPU it times `--model` when given, else a Qwen3-4B-shaped random-weight pair
(written once under ~/.cache/tileinfer/random) beside the embedded pair's real acceptance.
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
# The kernel's own log (e.g. its warning about local TCP transport) is not the report's business.
KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]


def parameters(model=None, draft=None, weights="bf16", live=True, new_tokens=None, points=None, gpu=None,
               shaped=None, acceptance_tokens=None):
    """The notebook's parameters: what was given, and small CPU sizes when there is no GPU. model None:
    on a GPU a random-weight pair of `shaped` ("qwen3-4b" by default), on a CPU the embedded pair (or,
    with `shaped`, that random pair there too)."""
    import torch

    gpu = torch.cuda.is_available() if gpu is None else gpu
    params = {"model": model, "draft": draft, "weights": weights, "live": live,
              "shaped": shaped or ("qwen3-4b" if gpu and model is None else None),
              "new_tokens": new_tokens or (128 if gpu else 32), "points": points or (["1k", "8k"] if gpu else ["1k"]),
              "acceptance_tokens": acceptance_tokens, "results": str(RESULTS), "reference": str(REFERENCE)}
    return params


def expected_duration(params, gpu):
    """What the user waits for, said before the wait."""
    if not params["live"]:
        return "recorded results only: under a minute"
    if gpu:
        first = " (the first run also writes the random pair, ~9 GB, once)" if params["shaped"] else ""
        return f"a few minutes on the GPU{first}"
    return "one to two minutes on two CPU cores"


def _kernel_env():
    """The kernel must import this checkout's packages whether or not they are pip-installed."""
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), path) if p)


def to_html(notebook_path, html_path):
    """The report page of an executed notebook: no code, no stderr, the findings first, plotly.js once."""
    import nbformat

    from tileinfer_profiling.report_html import report_html

    book = nbformat.read(str(notebook_path), as_version=4)
    Path(html_path).write_text(report_html(book), encoding="utf-8")
    return html_path


def run(out="reports", timeout_s=1800, progress=True, **kwargs):
    """Execute the report; returns (notebook path, html path, summary DataFrame or None). `progress`:
    papermill's bar on stderr, one step per cell, after a line saying what runs and for how long."""
    import pandas as pd
    import papermill
    import torch

    from tileinfer.errors import ConfigError

    try:
        import ipykernel  # noqa: F401  (papermill's "python3" kernel is this environment's ipykernel)
    except ImportError as e:
        raise ConfigError("the report needs ipykernel in this environment: run `make env-notebooks` "
                          "or `pip install -e .[notebooks]`") from e
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.is_available()
    params = parameters(gpu=gpu, **kwargs)
    params["summary_path"] = str(out / "summary.csv")
    _kernel_env()
    notebook_out, html_out = out / "report.ipynb", out / "report.html"
    if progress:
        where = torch.cuda.get_device_name() if gpu else "the CPU (no GPU)"
        print(f"running {NOTEBOOK.relative_to(REPO)} on {where}: {expected_duration(params, gpu)}", file=sys.stderr)
    papermill.execute_notebook(str(NOTEBOOK), str(notebook_out), parameters=params, kernel_name="python3",
                               cwd=str(NOTEBOOK.parent), execution_timeout=timeout_s,
                               progress_bar={"desc": "report", "unit": "cell"} if progress else False,
                               extra_arguments=KERNEL_ARGS)
    to_html(notebook_out, html_out)
    summary_path = Path(params["summary_path"])
    summary = pd.read_csv(summary_path, dtype=str, keep_default_na=False) if summary_path.is_file() else None
    return notebook_out, html_out, summary


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="reports", help="output directory (default: reports)")
    ap.add_argument("--model", help="target checkpoint to time (default: on a GPU a random pair of --shaped, "
                    "on a CPU the embedded pair)")
    ap.add_argument("--draft", help="DFlash drafter checkpoint (default: the pair's)")
    ap.add_argument("--weights", default="bf16", choices=["bf16", "int8"])
    ap.add_argument("--shaped", help="with no --model: a random-weight pair of these shapes, written once "
                    "(default: qwen3-4b on a GPU; on a CPU only when given, e.g. tiny)")
    ap.add_argument("--new-tokens", type=int, help="tokens per generation (default: 128 on a GPU, 32 on a CPU)")
    ap.add_argument("--acceptance-tokens", type=int, help="tokens per acceptance run (default: the benchmark's)")
    ap.add_argument("--points", help="acceptance points, comma-separated: 1k,8k (default: 1k,8k on a GPU, 1k on a CPU)")
    ap.add_argument("--recorded", action="store_true", help="no live measurements: recorded results only")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    notebook, html, summary = run(args.out, model=args.model, draft=args.draft, weights=args.weights,
                                  live=not args.recorded, new_tokens=args.new_tokens, shaped=args.shaped,
                                  acceptance_tokens=args.acceptance_tokens,
                                  points=args.points.split(",") if args.points else None)
    print(f"report notebook: {notebook}")
    print(f"report HTML:     {html} ({html.stat().st_size / 1e6:.1f} MB, self-contained: open it in a browser)")
    if summary is not None:
        print(summary.to_string(index=False))
    print(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

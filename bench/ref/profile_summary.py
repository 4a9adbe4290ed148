"""One CSV of profile.sh's step profiles: a row per task x variant (eager launches, CUDA graphs) with GEMM
and attention ms per step and busy %, beside the comparison's figures (reference.csv, source line 31).

    python -m bench.ref.profile_summary PROFILE_DIR --tasks edit,explain --out profile_8k_h200.csv \
        --command "RANDOM_WEIGHTS=qwen3-4b bench/ref/profile.sh"
"""

import argparse
from pathlib import Path

import pandas as pd

from tileinfer_profiling.run_info import run_info


def summary_rows(profile_dir, tasks, point="8k", **columns):
    """The `summary.csv` of each task's profile under `profile_dir/<task>`, with task, point and `columns`;
    a task whose profile is missing is left out (its process failed)."""
    frames = []
    for task in tasks:
        path = Path(profile_dir) / task / "summary.csv"
        if path.is_file():
            # the profiler names the checkpoints by path: `columns` name the model instead
            df = pd.read_csv(path).drop(columns=["model", "draft"], errors="ignore")
            frames.append(df.assign(task=task, point=point, **columns))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m bench.ref.profile_summary", description=__doc__.split("\n")[0])
    ap.add_argument("profile_dir")
    ap.add_argument("--tasks", default="edit,explain")
    ap.add_argument("--point", default="8k")
    ap.add_argument("--model", default="", help="what the rows' `model` says (a preset or checkpoint name)")
    ap.add_argument("--accept-mode", default="real")
    ap.add_argument("--command", required=True, help="the command that made the profiles, as typed at the root")
    ap.add_argument("--out", required=True)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    info = run_info()
    df = summary_rows(args.profile_dir, args.tasks.split(","), args.point, model=args.model,
                      accept_mode=args.accept_mode, gpu=info["gpu"], torch=info["torch"], triton=info["triton"],
                      git_rev=info["git_rev"], command=args.command)
    if df.empty:
        raise SystemExit(f"no profile summaries under {args.profile_dir}")
    df.to_csv(args.out, index=False)
    cols = [c for c in ("task", "variant", "mean_tokens_per_step", "wall_step_ms", "gemm_ms", "attention_ms",
                        "busy_pct") if c in df]
    print(df[cols].round(2).to_string(index=False))


if __name__ == "__main__":
    main()

"""The comparison's published figures, as the bench scripts use them: reference.csv holds every figure of
comparison-with-vllm.txt (tests/test_bench_reference.py checks them against the text).

    python -m bench.ref.reference accept-profile 1k         # edit=7.1,explain=2.9 (TileInfer, BF16)
    python -m bench.ref.reference accept-profile 1k,8k      # 1k:edit=7.1,1k:explain=2.9,8k:edit=1.87,8k:explain=2.5
    python -m bench.ref.reference tokens-per-step 8k edit   # 1.87
"""

import argparse
import functools
from pathlib import Path

from tileinfer_profiling.compare import load_reference, tokens_per_step as _tokens_per_step

REFERENCE_CSV = Path(__file__).with_name("reference.csv")
TASKS = ("edit", "explain")


@functools.lru_cache(maxsize=1)
def reference():
    """reference.csv as `tileinfer_profiling.compare.load_reference` reads it."""
    return load_reference(REFERENCE_CSV)


def rows():
    """One dict per figure: engine, gpu, gpu_bandwidth_gbs, point, task, weights, metric, value, unit,
    source_line (of the comparison text), note."""
    return reference().to_dict("records")


def tokens_per_step(point, task, weights="bf16", engine="tileinfer"):
    """Mean tokens per DFlash step of `engine` in the comparison, e.g. 7.1 for TileInfer's 1k edit in BF16."""
    return _tokens_per_step(reference(), point, task, weights, engine)


def accept_profile(point, tasks=TASKS, weights="bf16"):
    """`--accept-profile` of the bench scripts: TileInfer's tokens per step per task, e.g. "edit=7.1,explain=2.9";
    for several points ("1k,8k") each entry names its point: "1k:edit=7.1,...,8k:edit=1.87,..."."""
    points = point.split(",")
    if len(points) == 1:
        return ",".join(f"{task}={tokens_per_step(point, task, weights):g}" for task in tasks)
    return ",".join(f"{p}:{task}={tokens_per_step(p, task, weights):g}" for p in points for task in tasks)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.ref.reference", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    a = sub.add_parser("accept-profile", help="task=tokens_per_step pairs of TileInfer at a point (or points)")
    a.add_argument("point")
    a.add_argument("--tasks", default=",".join(TASKS))
    a.add_argument("--weights", default="bf16")
    t = sub.add_parser("tokens-per-step", help="one figure")
    t.add_argument("point")
    t.add_argument("task")
    t.add_argument("--weights", default="bf16")
    t.add_argument("--engine", default="tileinfer")
    args = ap.parse_args(argv)
    if args.what == "accept-profile":
        print(accept_profile(args.point, args.tasks.split(","), args.weights))
    else:
        print(f"{tokens_per_step(args.point, args.task, args.weights, args.engine):g}")


if __name__ == "__main__":
    main()

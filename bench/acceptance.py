"""Tokens per step of a DFlash pair (greedy, lossless), one row per prompt: the benchmark prompts and
the held-out prompts (`tileinfer_profiling.prompts.heldout`: phrasings and files the default pair
never trained on).

    python bench/acceptance.py [--model DIR --draft DIR] [--points 1k,8k] [--seeds 1] [--heldout 4]
        [--block-sizes 4,8,16] [--out bench/results/acceptance_default.csv]
        [--heldout-out bench/results/acceptance_heldout.csv]

Without --model: the embedded default pair. Each row also checks the DFlash reply against plain
greedy decoding of the target. `--seeds N` measures the benchmark's prompts of seeds 0 … N − 1 (seed 0
is the comparison's own; one reply is a noisy measure of a pair). The last lines are the means per set,
task and point. `--block-sizes` decodes each prompt with each of those blocks (anchor + drafts; rows
carry a `block` column): whether a shorter block's drafts are those of the longer one's first positions,
and what a block sized to a prompt's acceptance would keep of its tokens per step.
"""

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from tileinfer_profiling.prompts import POINTS, load_prompt  # noqa: E402
from tileinfer_profiling.prompts.heldout import TASKS as HELDOUT_TASKS, heldout_prompt  # noqa: E402
from tileinfer_profiling.run_info import command_line, run_info  # noqa: E402


def measure(engine, ids, new_tokens, blocks=(None,)):
    """A row per block (None: the drafter's own), each reply checked against one plain greedy decode."""
    plain = engine.generate(ids, new_tokens, block_size=1)
    for block in blocks:
        spec = engine.generate(ids, new_tokens, block_size=block)
        s = spec.stats
        yield {"block": s.block_size, "prompt_tokens": s.prompt_tokens, "new_tokens": s.new_tokens, "steps": s.steps,
               "mean_tokens_per_step": round(s.mean_tokens_per_step, 3),
               "histogram": " ".join(f"{k}:{v}" for k, v in s.histogram.items()), "stop_reason": s.stop_reason,
               "lossless": spec.tokens == plain.tokens, "dflash_tok_s": round(s.decode_tok_s, 1),
               "plain_tok_s": round(plain.stats.decode_tok_s, 1)}


def benchmark_rows(engine, points, name, seeds=1, blocks=(None,)):
    for point in points:
        for task in ("edit", "explain"):
            for seed in range(seeds):
                prompt = load_prompt(task, point, engine.tokenizer, name=name, seed=seed)
                for row in measure(engine, prompt.ids, POINTS[point].new_tokens, blocks):
                    yield {"set": "benchmark", "task": task, "point": point, "source": f"julia:seed={prompt.seed}",
                           **row}


def means(rows):
    """{(set, task, point, block): (prompts, mean tokens per step)} over the prompts that decoded a step."""
    groups = {}
    for r in rows:
        if r["steps"]:
            groups.setdefault((r["set"], r["task"], r["point"], r["block"]), []).append(r["mean_tokens_per_step"])
    return {k: (len(v), sum(v) / len(v)) for k, v in groups.items()}


def heldout_rows(engine, points, per_task, new_tokens=None, blocks=(None,)):
    for point in points:
        for task in HELDOUT_TASKS:
            for index in range(per_task):
                p = heldout_prompt(task, POINTS[point].prompt_tokens, engine.tokenizer, index)
                for row in measure(engine, p.ids, new_tokens or POINTS[point].new_tokens, blocks):
                    yield {"set": "heldout", "task": task, "point": point, "source": p.source, "index": index, **row}


def write_csv(path, rows):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--draft", default=None)
    parser.add_argument("--name", default="default", help="tokenizer name of the stored prompts")
    parser.add_argument("--points", default="1k,8k")
    parser.add_argument("--weights", default="bf16")
    parser.add_argument("--exact", choices=("on", "off"), default="on",
                        help="exact mode (a row's bits do not depend on the step's size), so the lossless "
                             "check holds bit for bit; off: the engine's faster default for a checkpoint")
    parser.add_argument("--seeds", type=int, default=1,
                        help="benchmark prompts per task and point (seeds 0 … N − 1; 0: none)")
    parser.add_argument("--heldout", type=int, default=4, help="held-out prompts per task and point (0: none)")
    parser.add_argument("--heldout-new-tokens", type=int, default=None,
                        help="reply length of the held-out prompts (default: the point's)")
    parser.add_argument("--block-sizes", default=None,
                        help="comma-separated blocks (anchor + drafts) each prompt is decoded with (default: the "
                             "drafter's own)")
    parser.add_argument("--out", default="bench/results/acceptance_default.csv")
    parser.add_argument("--heldout-out", default="bench/results/acceptance_heldout.csv")
    args = parser.parse_args(argv)
    points = args.points.split(",")
    if not 0 <= args.seeds <= 8:
        parser.error(f"--seeds {args.seeds}: the benchmark's prompts are seeds 0-7, so 0 (none) to 8")
    for point in points:
        if point not in POINTS:
            parser.error(f"unknown point {point!r}: use some of {', '.join(POINTS)}")
    try:
        blocks = tuple(int(b) for b in args.block_sizes.split(",")) if args.block_sizes else (None,)
    except ValueError:
        parser.error(f"--block-sizes {args.block_sizes!r}: comma-separated integers")
    engine = tileinfer.load(args.model, draft=args.draft, weights=args.weights, exact=args.exact == "on")
    bad = [b for b in blocks if b is not None and not 2 <= b <= engine.block_max]
    if bad:
        parser.error(f"--block-sizes {args.block_sizes}: a DFlash block is 2 … {engine.block_max} (the drafter's), "
                     f"got {', '.join(map(str, bad))}")
    info = {**run_info(), "backend": engine.backend, "weights": args.weights, "exact": args.exact,
            "command": command_line(),
            "model": "embedded default" if args.model is None else args.model}
    sets = [(args.out, benchmark_rows(engine, points, args.name, args.seeds, blocks))] if args.seeds else []
    if args.heldout:
        sets.append((args.heldout_out, heldout_rows(engine, points, args.heldout, args.heldout_new_tokens, blocks)))
    for out, rows_of in sets:
        rows, t0 = [], time.perf_counter()
        for row in rows_of:
            rows.append({**row, **info})
            print(f"{row['set']:9} {row['task']:8} {row['point']:3} {row['source']:24} block {row['block']:2} "
                  f"{row['mean_tokens_per_step']:6.2f} tokens/step over {row['steps']:4} steps, "
                  f"lossless {row['lossless']}, {time.perf_counter() - t0:.0f} s", flush=True)
        write_csv(out, rows)
        for (set_, task, point, block), (n, mean) in means(rows).items():
            print(f"mean {set_:9} {task:8} {point:3} block {block:2} {mean:6.2f} tokens/step over {n} prompts")


if __name__ == "__main__":
    main()

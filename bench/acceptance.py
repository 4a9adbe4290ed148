"""Tokens per step of a DFlash pair on the benchmark prompts (greedy, lossless), one row per prompt.

    python bench/acceptance.py [--model DIR --draft DIR] [--points 1k,8k] [--out bench/results/acceptance_default.csv]

Without --model: the embedded default pair. Each row also checks the DFlash reply against plain
greedy decoding of the target.
"""

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from tileinfer_profiling.prompts import POINTS, load_prompt  # noqa: E402
from bench.ref.metric import environment  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402


def measure(engine, task, point, name):
    prompt = load_prompt(task, point, engine.tokenizer, name=name)
    new_tokens = POINTS[point].new_tokens
    spec = engine.generate(prompt.ids, new_tokens)
    plain = engine.generate(prompt.ids, new_tokens, block_size=1)
    s = spec.stats
    return {"task": task, "point": point, "prompt_tokens": s.prompt_tokens, "new_tokens": s.new_tokens,
            "steps": s.steps, "mean_tokens_per_step": round(s.mean_tokens_per_step, 3),
            "histogram": " ".join(f"{k}:{v}" for k, v in s.histogram.items()), "stop_reason": s.stop_reason,
            "lossless": spec.tokens == plain.tokens, "dflash_tok_s": round(s.decode_tok_s, 1),
            "plain_tok_s": round(plain.stats.decode_tok_s, 1)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--draft", default=None)
    parser.add_argument("--name", default="default", help="tokenizer name of the stored prompts")
    parser.add_argument("--points", default="1k,8k")
    parser.add_argument("--weights", default="bf16")
    parser.add_argument("--out", default="bench/results/acceptance_default.csv")
    args = parser.parse_args(argv)
    engine = tileinfer.load(args.model, draft=args.draft, weights=args.weights)
    env = environment(measure_bandwidth=False)
    rows = []
    for point in args.points.split(","):
        for task in ("edit", "explain"):
            t0 = time.perf_counter()
            row = {**measure(engine, task, point, args.name), "weights": args.weights,
                   "device": env["gpu"], "backend": engine.backend, "torch": env["torch"], "triton": env["triton"],
                   "git_rev": env["git_rev"], "command": command_line(),
                   "model": "embedded default" if args.model is None else args.model}
            rows.append(row)
            print(f"{task:8} {point}: {row['mean_tokens_per_step']:6.2f} tokens/step over {row['steps']} steps, "
                  f"lossless {row['lossless']}, {time.perf_counter() - t0:.0f} s", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()

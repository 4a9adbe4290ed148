"""What exact mode costs per step: the same engine loaded with exact=True and exact=False, timed side by
side (plain decode, and DFlash steps at the comparison's replayed tokens per step), BF16 and INT8, after
1k and 8k prompts, on a random-weight Qwen3 checkpoint of a real shape.

    python bench/exact_cost.py --out bench/results [--preset qwen3-4b] [--points 1k,8k] [--weights bf16,int8]
"""

import argparse
import gc
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench.engine_bench import POINTS, add_run_args, checkpoints, replayed, timed  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_args(parser)
    args = parser.parse_args(argv)
    env = environment(measure_bandwidth=False)
    base = {k: env[k] for k in ("gpu", "torch", "triton", "git_rev")} | {
        "command": command_line(), "weights_kind": "random", "preset": args.preset}
    target, drafter = checkpoints(args.preset, Path(args.root))
    g = torch.Generator().manual_seed(0)
    rows = []
    for weights in args.weights.split(","):
        engines = {mode: tileinfer.load(target, draft=drafter, weights=weights, exact=mode == "exact")
                   for mode in ("exact", "fast")}
        for point in args.points.split(","):
            ids = torch.randint(0, engines["exact"].config.vocab_size, (POINTS[point],), generator=g).tolist()
            for what, kw in [("plain decode", {"block_size": 1})] + [
                    (f"dflash step, replay:{tps}", {"accept_profile": tps}) for tps in replayed(point)[:1]]:
                r = {mode: timed(engine, ids, args.new_tokens, args.repeats, **kw) for mode, engine in engines.items()}
                rows.append(dict(what=what, weights=weights, point=point,
                                 exact_step_ms=r["exact"]["step_ms"], fast_step_ms=r["fast"]["step_ms"],
                                 exact_cost=r["exact"]["step_ms"] / r["fast"]["step_ms"] - 1,
                                 exact_tok_s=r["exact"]["decode_tok_s"], fast_tok_s=r["fast"]["decode_tok_s"]))
                print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
        del engines
        gc.collect()
        torch.cuda.empty_cache()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_rows([r | base for r in rows], out / f"exact_cost_{gpu_tag(env['gpu'])}.csv", last=tuple(base))
    print(f"\n{env['gpu']}, torch {env['torch']}, triton {env['triton']}, rev {env['git_rev']}; random weights "
          f"({args.preset}); rows in {path}")
    print(f"{'what':28} {'w':5} {'pt':4} {'exact ms':>9} {'fast ms':>8} {'cost':>7}")
    for r in rows:
        print(f"{r['what'][:28]:28} {r['weights']:5} {r['point']:4} {r['exact_step_ms']:9.3f} "
              f"{r['fast_step_ms']:8.3f} {100 * r['exact_cost']:6.1f}%")


if __name__ == "__main__":
    main()

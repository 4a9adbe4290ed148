"""End-to-end engine figures: plain decode and DFlash steps beside their byte floors, in one run.

The checkpoint is Qwen3-4B-shaped with random weights (written to disk, loaded through tileinfer.load):
random drafts are never accepted, so DFlash steps are also timed with replayed acceptance (the
comparison's tokens per step). Every row says which.

    python bench/engine_bench.py --out bench/results [--preset qwen3-4b] [--points 1k,8k] [--weights bf16,int8]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from bench.ref.reference import tokens_per_step  # noqa: E402
from bench.ref.tileinfer_spec import BENCH_ROOT, prepare_random  # noqa: E402
from tileinfer_profiling.prompts import POINTS as PROMPT_POINTS  # noqa: E402
from tileinfer_profiling.roofline import dflash_step_bytes, step_bytes  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402

# prompt tokens: the benchmark's points, the lengths between them where the attention's row blocks end, a long
# one, and one for the tiny preset's context
POINTS = ({name: p.prompt_tokens for name, p in PROMPT_POINTS.items()}
          | {"2k": 2048, "4k": 4096, "32k": 32768, "tiny": 200})


def replayed(point):
    """Tokens per step a DFlash step replays at `point`: TileInfer's in the comparison (edit and explain at
    1k; the edit at 8k, which stands for the other points); 3 on the tiny preset's prompts."""
    if point == "tiny":
        return (3.0,)
    if point == "1k":
        return tuple(tokens_per_step("1k", task) for task in ("edit", "explain"))
    return (tokens_per_step("8k", "edit"),)


def checkpoints(preset: str, root: Path):
    """The random-weight pair, shared with bench/ref/tileinfer_spec.py (written once under root/preset)."""
    target, drafter = prepare_random(preset, root / preset)
    return Path(target), Path(drafter)


def timed(engine, ids, new_tokens, repeats, **kw):
    """Median decode figures over `repeats` runs after one warm-up (which also captures the graphs)."""
    engine.generate(ids, new_tokens, stop_ids=[], **kw)
    runs = [engine.generate(ids, new_tokens, stop_ids=[], **kw).stats for _ in range(repeats)]
    step_ms = statistics.median(s.decode_ms / s.steps for s in runs)
    pick = min(runs, key=lambda s: abs(s.decode_ms / s.steps - step_ms))
    return {"step_ms": step_ms, "decode_tok_s": statistics.median(s.decode_tok_s for s in runs),
            "tokens_per_step": pick.mean_tokens_per_step, "steps": pick.steps,
            "drafter_ms": (pick.drafter_ms or 0) / pick.steps, "verify_ms": (pick.verify_ms or 0) / pick.steps,
            "prefill_ms": statistics.median(s.prefill_ms for s in runs)}


def busy(engine, ids, block_size, accept_profile=None):
    from tileinfer_profiling.step import profile_step
    prof = profile_step(engine, ids, block_size=block_size, max_new_tokens=48, accept_profile=accept_profile)
    graphs = prof.summary.set_index("variant")
    row = graphs.loc["graphs"] if "graphs" in graphs.index else graphs.iloc[-1]
    return float(row["busy_pct"]), prof


def write_profile(prof, out, weights, point, base):
    """A DFlash step's kernels (per step), per-layer times and summary, each row with its provenance:
    dflash_{kernels,layers,profile}_<weights>_<point>_<gpu>.csv."""
    keys = {"weights": weights, "point": point, "weights_kind": base["weights_kind"],
            **{k: base[k] for k in ("gpu", "torch", "triton", "git_rev", "command")}}
    tag = f"{weights}_{point}_{gpu_tag(base['gpu'])}"
    prof.kernel_table(top=None).assign(**keys).to_csv(out / f"dflash_kernels_{tag}.csv", index=False)
    prof.per_layer().assign(**keys).to_csv(out / f"dflash_layers_{tag}.csv", index=False)
    prof.summary.assign(**keys).to_csv(out / f"dflash_profile_{tag}.csv", index=False)


def add_run_args(parser) -> None:
    """The arguments of a run over one random-weight shape's engines: where, which shape, points and weights."""
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--preset", default="qwen3-4b")
    parser.add_argument("--points", default="1k,8k")
    parser.add_argument("--weights", default="bf16,int8")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--root", default=str(BENCH_ROOT), help="where the random checkpoints are kept")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_args(parser)
    parser.add_argument("--features", action="store_true", help="also eager / one split / cuBLAS variants at the first point")
    parser.add_argument("--profile", action="store_true", help="kernel profiles of a DFlash step at the last point")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(measure_bandwidth=torch.cuda.is_available())
    bw = env["gpu_bandwidth_gbs"] * 1e9 if env["gpu_bandwidth_gbs"] == env["gpu_bandwidth_gbs"] else float("nan")
    base = {**env, "command": command_line(), "weights_kind": "random", "preset": args.preset}
    t0 = time.perf_counter()
    target, drafter = checkpoints(args.preset, Path(args.root))
    print(f"checkpoints ready in {time.perf_counter() - t0:.0f} s", flush=True)
    rows = []

    def record(**row):
        row = {**base, **row}
        rows.append(row)
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k not in base}, flush=True)

    g = torch.Generator().manual_seed(0)
    points = args.points.split(",")
    for weights in args.weights.split(","):
        engine = tileinfer.load(target, draft=drafter, weights=weights)
        cfg, dcfg = engine.config, engine.drafter.config
        for point in points:
            n = POINTS[point]
            ids = torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist()
            kv = n + args.new_tokens // 2
            plain_floor = step_bytes(cfg, kv, 1, weights) / bw * 1e3
            r = timed(engine, ids, args.new_tokens, args.repeats, block_size=1)
            record(what="plain decode", weights=weights, point=point, accept="-", **r,
                   floor_ms=plain_floor, of_floor=plain_floor / r["step_ms"])
            plain_step = r["step_ms"]
            dflash_floor = dflash_step_bytes(cfg, dcfg, kv, weights) / bw * 1e3
            for tps in (None, *replayed(point)):
                r = timed(engine, ids, args.new_tokens, args.repeats, accept_profile=tps)
                record(what="dflash step", weights=weights, point=point,
                       accept="random drafter" if tps is None else f"replay:{tps}", **r, floor_ms=dflash_floor,
                       of_floor=dflash_floor / r["step_ms"], vs_plain_step=r["step_ms"] / plain_step)
            if point == points[0]:
                pct, _ = busy(engine, ids, 1)
                record(what="busy plain decode (graphs)", weights=weights, point=point, busy_pct=pct)
                pct, _ = busy(engine, ids, 16, accept_profile=replayed(point)[0])
                record(what="busy dflash step (graphs)", weights=weights, point=point, busy_pct=pct,
                       accept=f"replay:{replayed(point)[0]}")
            if args.features and point == points[0] and weights == "bf16":
                for label, kw in (("eager (no CUDA graphs)", {"eager": True}), ("one split", {"num_splits": 1})):
                    r = timed(engine, ids, args.new_tokens, args.repeats, block_size=1, **kw)
                    record(what=f"plain decode, {label}", weights=weights, point=point, accept="-", **r)
                    r = timed(engine, ids, args.new_tokens, args.repeats, accept_profile=replayed(point)[0], **kw)
                    record(what=f"dflash step, {label}", weights=weights, point=point,
                           accept=f"replay:{replayed(point)[0]}", **r)
            if args.profile and point == points[-1]:
                _, prof = busy(engine, ids, 16, accept_profile=replayed(point)[0])
                write_profile(prof, out, weights, point, base)
        del engine
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
        if args.features and weights == "bf16":
            cublas = tileinfer.load(target, draft=drafter, weights="bf16", linear="cublas")
            n = POINTS[points[0]]
            ids = torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist()
            r = timed(cublas, ids, args.new_tokens, args.repeats, block_size=1)
            record(what="plain decode, cuBLAS linears", weights="bf16", point=points[0], accept="-", **r)
            r = timed(cublas, ids, args.new_tokens, args.repeats, accept_profile=replayed(points[0])[0])
            record(what="dflash step, cuBLAS linears", weights="bf16", point=points[0],
                   accept=f"replay:{replayed(points[0])[0]}", **r)
            del cublas

    path = write_rows(rows, out / f"engine_{gpu_tag(env['gpu'])}.csv", last=base)
    print(f"\n{env['gpu']}, torch {env['torch']}, triton {env['triton']}, rev {env['git_rev']}, "
          f"read bandwidth {env['gpu_bandwidth_gbs']} GB/s; random weights ({args.preset}); rows in {path}")
    print(f"{'what':34} {'w':5} {'pt':4} {'accept':15} {'step ms':>8} {'tok/s':>8} {'tok/step':>8} {'floor':>7} {'of floor':>8} {'busy%':>6}")
    for r in rows:
        print(f"{r['what'][:34]:34} {r['weights']:5} {r['point']:4} {str(r.get('accept', '')):15} "
              f"{r.get('step_ms', float('nan')):8.3f} {r.get('decode_tok_s', float('nan')):8.1f} "
              f"{r.get('tokens_per_step', float('nan')):8.2f} {r.get('floor_ms', float('nan')):7.3f} "
              f"{r.get('of_floor', float('nan')):8.2f} {r.get('busy_pct', float('nan')):6.1f}")


if __name__ == "__main__":
    main()

"""Sampling on a GPU: speculative sampling lossless through CUDA graphs, its cost per step against
greedy, and tokens per DFlash step at temperatures 0, 0.6 and 1.0.

    python bench/sampling_bench.py --out bench/results [--samples 20000] [--max-seconds S] [--parts distribution,cost,acceptance]

1. distribution: the embedded pair (FP32 weights, exact mode) samples the first tokens after an
   explain prompt --samples times per configuration (graph replays), against the distribution
   enumerated from its own logits (chi-square, p > 0.001 passes).
2. cost: a step with sampling (and with top-k/top-p) against a greedy step, plain decoding and DFlash
   with replayed acceptance, on a random-weight Qwen3-4B checkpoint (bench/ref/tileinfer_spec.py's).
3. acceptance: tokens per step and acceptance per draft position of the embedded pair on the
   benchmark prompts at T = 0, 0.6, 1.0 (tileinfer_profiling.acceptance.temperature_runs).
4. ops: each piece of a sampling step alone (tempering, the top-k/top-p threshold by each method, the
   log-softmax, the speculative step) and the whole step in Triton (`ops.sample.sample_block`), on 1
   and 16 rows of 151,936 random logits, replayed from CUDA graphs (the logits stay in L2, as after the
   LM head that writes them).
5. launches: each launch of `sample_block` inside its CUDA graph (1 and 16 rows; T = 1, top-k 50 +
   top-p 0.95, top-p 0.95 alone): its duration and its own time (what it adds to the replay beyond the
   launches before it, `tileinfer_profiling.trace.own_times`), averaged over 20 replays.

Writes sampling_{distribution,cost,acceptance,ops,launches}_<gpu>.csv. --smoke: a few samples on the tiny preset,
to check the script on a CPU.
"""

import argparse
import gc
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench.engine_bench import POINTS, checkpoints, replayed, timed  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from bench.ref.tileinfer_spec import BENCH_ROOT  # noqa: E402
from tileinfer_profiling.acceptance import TEMPERATURES, temperature_runs  # noqa: E402
from tileinfer_profiling.engine_prompts import benchmark_prompt, points_that_fit  # noqa: E402
from tileinfer_profiling.prompts import POINTS as PROMPT_POINTS  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402
from tileinfer_profiling.sampling_check import Conditionals, chi_square, exact_distribution, reference_probs  # noqa: E402

# name: block, temperature, top_k, top_p, new tokens (DFlash blocks of 16 verified through their graphs),
# share of --samples
DISTRIBUTIONS = {
    "dflash-16": (16, 1.0, None, None, 16, 1.0),
    "plain-filtered": (1, 1.0, 40, 0.98, 4, 0.5),
}
# top-k 50 reads each row's largest logits (sampling.TOP_K_CANDIDATES); top-p alone sorts the rows
MODES = {"greedy": {}, "T=1": {"temperature": 1.0},
         "T=1, top-k 50, top-p 0.95": {"temperature": 1.0, "top_k": 50, "top_p": 0.95},
         "T=1, top-p 0.95": {"temperature": 1.0, "top_p": 0.95}}
MIN_EXPECTED = 50


def sampled_runs(engine, prompt, name, samples, seconds, **kw):
    """Up to `samples` seeded generate calls, fewer if `seconds` run out; progress every tenth. The clock
    starts after the first call, which compiles the kernels and captures the graphs."""
    runs = [engine.generate(prompt, seed=0, **kw)]
    tic = time.perf_counter()
    for seed in range(1, samples):
        runs.append(engine.generate(prompt, seed=seed, **kw))
        elapsed = time.perf_counter() - tic
        if (seed + 1) % max(1, samples // 10) == 0:
            print(f"  {name}: {seed + 1}/{samples} samples in {elapsed:.0f} s "
                  f"({elapsed / seed * 1e3:.2f} ms each after the first)", flush=True)
        if elapsed > seconds:
            print(f"  {name}: stopped at {seed + 1} samples, the time budget ({seconds:.0f} s) spent", flush=True)
            break
    return runs, time.perf_counter() - tic


def distribution(total, prompt_tokens, max_seconds=float("inf")):
    engine = tileinfer.load(weights="fp32")
    prompt = benchmark_prompt(engine, "explain", "1k")[-prompt_tokens:]  # free text follows: many likely tokens
    logits = Conditionals(engine, prompt)
    shares = sum(d[-1] for d in DISTRIBUTIONS.values())
    rows = []
    for name, (block, t, k, p, new_tokens, share) in DISTRIBUTIONS.items():
        runs, sample_s = sampled_runs(engine, prompt, name, max(1, round(total * share)), max_seconds * share / shares,
                                      max_new_tokens=new_tokens, stop_ids=[], block_size=block, temperature=t,
                                      top_k=k, top_p=p)
        samples = len(runs)
        tokens = [tuple(r.tokens) for r in runs]
        steps = sum(r.stats.steps for r in runs)
        for depth in (2, 4):
            exact = exact_distribution(lambda prefix: reference_probs(logits(prefix), t, k, p), depth,
                                       floor=MIN_EXPECTED / samples)
            result = chi_square([s[:depth] for s in tokens], exact, MIN_EXPECTED)
            rows.append(dict(config=name, block=block, temperature=t, top_k=k, top_p=p, new_tokens=new_tokens,
                             first_tokens=depth, samples=samples, chi2=round(result.stat, 2), dof=result.dof,
                             p_value=result.p_value, passed=result.p_value > 1e-3 and result.unlisted == 0,
                             cells=result.cells, zero_probability_samples=result.unlisted,
                             tokens_per_step=round(sum(len(s) - 1 for s in tokens) / max(steps, 1), 3),
                             graphs=engine.is_cuda and engine.backend == "triton",
                             sample_ms=round(sample_s / max(samples - 1, 1) * 1e3, 3)))
            print({k: rows[-1][k] for k in ("config", "first_tokens", "chi2", "dof", "p_value", "passed")}, flush=True)
    return rows, "embedded (fp32)"


def cost(preset, root, point, new_tokens, repeats):
    target, drafter = checkpoints(preset, Path(root))
    engine = tileinfer.load(target, draft=drafter, weights="bf16")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, engine.config.vocab_size, (POINTS[point],), generator=g).tolist()
    rows = []
    for what, kw in (("plain decode", {"block_size": 1}), (f"dflash step, replay:{replayed(point)[0]}",
                                                           {"accept_profile": replayed(point)[0]})):
        greedy = None
        for mode, sampling in MODES.items():
            r = timed(engine, ids, new_tokens, repeats, **kw, **sampling)
            greedy = greedy or r["step_ms"]
            rows.append(dict(what=what, sampling=mode, point=point, step_ms=r["step_ms"],
                             verify_ms=r["verify_ms"], drafter_ms=r["drafter_ms"], tokens_per_step=r["tokens_per_step"],
                             decode_tok_s=r["decode_tok_s"], cost_vs_greedy=r["step_ms"] / greedy - 1))
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    del engine
    gc.collect()
    return rows, f"random ({preset})"


def ops(vocab, rows_list=(1, 16), top_k=50, top_p=0.95, only=""):
    """µs per call of each piece of a sampling step, on `rows` random bf16 logit rows (pieces whose name
    starts with `only`)."""
    from bench.gemm_bench import time_us
    from tileinfer import sampling
    from tileinfer.ops.sample import sample_block
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    temperature = torch.ones(1, device=dev)
    k = torch.full((1,), top_k, dtype=torch.int64, device=dev)
    p, p_one = torch.full((1,), top_p, device=dev), torch.ones(1, device=dev)
    k_all = torch.full((1,), vocab, dtype=torch.int64, device=dev)
    cand = min(sampling.TOP_K_CANDIDATES, vocab - 1)
    out = []
    for rows in rows_list:
        logits = (3 * torch.randn(rows, vocab, device=dev, generator=g)).to(torch.bfloat16)
        scaled = logits / temperature
        logp = scaled.log_softmax(dim=-1)
        drafts = torch.randint(0, vocab, (rows - 1,), device=dev, generator=g)
        u = torch.rand(rows, device=dev, generator=g, dtype=torch.float64)
        pieces = {
            "greedy argmax": lambda: logits.argmax(dim=-1),
            "temper (bf16 -> fp32 / T)": lambda: logits / temperature,
            "log_softmax": lambda: scaled.log_softmax(dim=-1),
            "speculative_sample": lambda: sampling.speculative_sample(logp, drafts, u),
            "sort": lambda: scaled.sort(dim=-1),
            f"topk {cand} sorted": lambda: scaled.topk(cand, dim=-1),
            f"topk {cand} unsorted": lambda: scaled.topk(cand, dim=-1, sorted=False),
            f"topk {top_k} sorted": lambda: scaled.topk(top_k, dim=-1),
            f"topk {cand} unsorted, then sorted": lambda: scaled.topk(cand, dim=-1, sorted=False).values.sort(dim=-1),
            "threshold by sort (top-k, top-p)": lambda: sampling._threshold_from_sort(scaled, k, p),
            "threshold by sort (top-p)": lambda: sampling._threshold_from_sort(scaled, k.new_full((1,), vocab), p),
            "threshold by candidates (top-k, top-p)": lambda: sampling._threshold_from_candidates(scaled, k, p, cand),
            "filter_logits (top-k, top-p)": lambda: sampling.filter_logits(scaled, k, p, cand),
            "whole step T=1": lambda: sampling.speculative_sample(
                sampling.log_probs(logits, temperature, k, p_one, False), drafts, u),
            "whole step top-k, top-p": lambda: sampling.speculative_sample(
                sampling.log_probs(logits, temperature, k, p, True, cand), drafts, u),
            "sample_block T=1": lambda: sample_block(logits, drafts, u, temperature, k_all, p_one, False),
            "sample_block top-k, top-p": lambda: sample_block(logits, drafts, u, temperature, k, p, True),
            "sample_block top-p": lambda: sample_block(logits, drafts, u, temperature, k_all, p, True),
        }
        for name, call in pieces.items():
            if not name.startswith(only):
                continue
            us = time_us([call])
            out.append(dict(rows=rows, vocab=vocab, piece=name, us=us))
            print(f"  {rows:3d} rows  {name:40s} {us:9.2f} µs", flush=True)
    return out, "random logits (3 · N(0, 1), bf16)"


LAUNCH_CONFIGS = {"T=1": (None, 1.0, False), "top-k 50, top-p 0.95": (50, 0.95, True), "top-p 0.95": (None, 0.95, True)}


def launches(vocab, rows_list=(1, 16), replays=20):
    """Each launch of `sample_block` in its CUDA graph: mean duration and own time over `replays` replays."""
    from tileinfer.ops.sample import sample_block
    from tileinfer_profiling.run_info import require_gpu
    from tileinfer_profiling.trace import trace_kernels
    require_gpu("the launches part (kernels timed inside a CUDA graph)")
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    out = []
    for rows in rows_list:
        logits = (3 * torch.randn(rows, vocab, device=dev, generator=g)).to(torch.bfloat16)
        drafts = torch.randint(0, vocab, (rows - 1,), device=dev, generator=g)
        u = torch.rand(rows, device=dev, generator=g, dtype=torch.float64)
        temperature = torch.ones(1, device=dev)
        for name, (top_k, top_p, filtered) in LAUNCH_CONFIGS.items():
            k = torch.full((1,), top_k or vocab, dtype=torch.int64, device=dev)
            p = torch.full((1,), top_p, device=dev)

            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                sample_block(logits, drafts, u, temperature, k, p, filtered)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                sample_block(logits, drafts, u, temperature, k, p, filtered)

            def replayed():
                for _ in range(replays):
                    graph.replay()
            kernels = trace_kernels(replayed).sort_values("start_us", kind="stable")
            per = len(kernels) // replays
            kernels = kernels.iloc[:per * replays].assign(launch=[i % per for i in range(per * replays)])
            for launch, group in kernels.groupby("launch", sort=True):
                out.append(dict(rows=rows, vocab=vocab, sampling=name, launch=launch, kernel=group["name"].iloc[0][:60],
                                duration_us=round(group["duration_us"].mean(), 2), own_us=round(group["own_us"].mean(), 2),
                                replays=replays))
            total = sum(r["own_us"] for r in out if (r["rows"], r["sampling"]) == (rows, name))
            print(f"  {rows:3d} rows  {name:24s} {per:3d} launches, {total:8.2f} µs of own time", flush=True)
    return out, "random logits (3 · N(0, 1), bf16)"


def acceptance(points, seeds, new_tokens=None):
    engine = tileinfer.load()
    rows = []
    for point in points:
        n = new_tokens or PROMPT_POINTS[point].new_tokens
        if not points_that_fit(engine, [point], n):
            continue
        runs = temperature_runs(engine, ("edit", "explain"), (point,), n, TEMPERATURES, seeds=seeds)
        for r in runs.to_dict("records"):
            r["acceptance_per_position"] = " ".join(f"{a:.3f}" for a in r["acceptance_per_position"])
            rows.append(r)
            print({k: r[k] for k in ("point", "task", "temperature", "mean_tokens_per_step")}, flush=True)
    return rows, "embedded (bf16)"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--parts", default="distribution,cost,acceptance")
    parser.add_argument("--samples", type=int, default=20_000,
                        help="runs of the DFlash distribution check (half as many for plain decoding)")
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="sampling time of the distribution part, shared by its configurations (fewer samples)")
    parser.add_argument("--preset", default="qwen3-4b", help="random checkpoint timed in the cost part")
    parser.add_argument("--point", default="1k", help="prompt length of the cost part")
    parser.add_argument("--points", default="1k,8k", help="benchmark prompts of the acceptance part")
    parser.add_argument("--seeds", type=int, default=4, help="sampled runs pooled per temperature")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--root", default=str(BENCH_ROOT), help="where the random checkpoints are kept")
    parser.add_argument("--pieces", default="", help="ops part: only the pieces whose name starts with this")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script on a CPU")
    args = parser.parse_args(argv)
    if args.smoke:
        args.samples, args.preset, args.point, args.points, args.seeds, args.repeats = 8, "tiny", "tiny", "1k", 1, 1
    env = environment(measure_bandwidth=False)
    base = {k: env[k] for k in ("gpu", "torch", "triton", "git_rev")} | {"command": command_line()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parts, tables = args.parts.split(","), {}
    t0 = time.perf_counter()
    if "distribution" in parts:
        tables["distribution"] = distribution(args.samples, 16 if args.smoke else 64, args.max_seconds)
    if "cost" in parts:
        tables["cost"] = cost(args.preset, args.root, args.point, 16 if args.smoke else 128, args.repeats)
    if "acceptance" in parts:
        tables["acceptance"] = acceptance(args.points.split(","), args.seeds, 8 if args.smoke else None)
    if "ops" in parts:
        tables["ops"] = ops(2_000 if args.smoke else 151_936, only=args.pieces)
    if "launches" in parts:
        tables["launches"] = launches(2_000 if args.smoke else 151_936)
    for part, (rows, kind) in tables.items():
        path = write_rows([r | base | {"weights_kind": kind} for r in rows],
                          out / f"sampling_{part}_{gpu_tag(env['gpu'])}.csv", last=(*base, "weights_kind"))
        print(f"rows in {path}")
    print(f"\n{env['gpu']}, torch {env['torch']}, triton {env['triton']}, rev {env['git_rev']}; "
          f"{time.perf_counter() - t0:.0f} s")
    summary(tables)


def summary(tables):
    if "distribution" in tables:
        print(f"\n{'distribution':18} {'tokens':>6} {'samples':>8} {'chi2':>9} {'dof':>5} {'p':>8} {'tok/step':>8}  ok")
        for r in tables["distribution"][0]:
            print(f"{r['config']:18} {r['first_tokens']:6} {r['samples']:8} {r['chi2']:9.1f} {r['dof']:5} "
                  f"{r['p_value']:8.4f} {r['tokens_per_step']:8.2f}  {r['passed']}")
    if "cost" in tables:
        print(f"\n{'step cost':34} {'sampling':26} {'step ms':>8} {'vs greedy':>9}")
        for r in tables["cost"][0]:
            print(f"{r['what'][:34]:34} {r['sampling']:26} {r['step_ms']:8.3f} {100 * r['cost_vs_greedy']:8.1f}%")
    if "ops" in tables:
        print(f"\n{'piece of a sampling step':40} {'1 row µs':>9} {'16 rows µs':>10}")
        by = {(r["piece"], r["rows"]): r["us"] for r in tables["ops"][0]}
        for piece in dict.fromkeys(r["piece"] for r in tables["ops"][0]):
            print(f"{piece:40} {by.get((piece, 1), float('nan')):9.2f} {by.get((piece, 16), float('nan')):10.2f}")
    if "launches" in tables:
        print(f"\n{'launches of sample_block':30} {'#':>3} {'kernel':24} {'dur µs':>8} {'own µs':>8}")
        for r in tables["launches"][0]:
            print(f"{str(r['rows']) + ' rows, ' + r['sampling']:30} {r['launch']:3} {r['kernel'][:24]:24} "
                  f"{r['duration_us']:8.2f} {r['own_us']:8.2f}")
    if "acceptance" in tables:
        print(f"\n{'tokens per step':18} " + " ".join(f"{'T=' + str(t):>7}" for t in TEMPERATURES))
        rows = tables["acceptance"][0]
        for point, task in dict.fromkeys((r["point"], r["task"]) for r in rows):
            by_t = {r["temperature"]: r["mean_tokens_per_step"] for r in rows if (r["point"], r["task"]) == (point, task)}
            print(f"{point + ' ' + task:18} " + " ".join(f"{by_t.get(t, float('nan')):7.2f}" for t in TEMPERATURES))


if __name__ == "__main__":
    main()

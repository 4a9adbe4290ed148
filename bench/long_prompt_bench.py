"""Long prompts on one GPU: prefill memory and time, chunked against one-shot, the memory plan beside
every measurement, the longest prompt under a memory cap, and DFlash decode after a long prompt.

Qwen3-4B-shaped random checkpoint with a 5-layer DFlash drafter, BF16 (bench/engine_bench.py writes it).
- prefill rows: per length × chunk (2048/4096/8192 and one-shot), torch.cuda.max_memory_allocated above
  weights + KV caches ("activations") against the plan, and prefill ms (median of --repeats);
- cap rows: the plan's longest prompt under --cap-gb (torch.cuda.set_per_process_memory_fraction; the
  CUDA context is not counted), then real DFlash runs binary-searching the true limit (≤ 4 runs);
- decode row: DFlash tok/s at the longest length with replayed acceptance (--accept: by default the
  comparison's tokens per step on the edit task at 8k, bench/ref/reference.csv; random drafts accept nothing).
The rows of the H200 run set DEFAULT_PREFILL_CHUNK: the smallest chunk within ~2 % of one-shot time.

    python bench/long_prompt_bench.py --out $OUT                      # H200, ~3 min with the checkpoint cached
    python bench/long_prompt_bench.py --out lp --preset tiny --lengths 96,300 --chunks 16,64 --cap-gb 0.002
"""

import argparse
import gc
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench.engine_bench import checkpoints  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from bench.ref.reference import tokens_per_step  # noqa: E402
from bench.ref.tileinfer_spec import BENCH_ROOT  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402
from tileinfer_profiling.memory_peaks import measure_peak_bytes  # noqa: E402

GB = 1e9


def reset_caches(engine):
    """Drop the KV caches and step graphs, so the next request allocates exactly what it needs."""
    for cache in (engine.cache, engine.draft_cache):
        if cache is not None:
            cache.k = cache.v = None
            cache.capacity = 0
    engine._drop_graphs()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def prompt(n, vocab, seed=0):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def prefill_rows(engine, lengths, chunks, new_tokens, repeats, device):
    """Each length at each chunk and one-shot: activation peak above weights + caches, and prefill ms."""
    rows = []
    engine.memory_budget = math.inf
    engine._ensure_caches(max(lengths) + new_tokens + 2 * engine.block_max)  # no cache growth inside a measurement
    for n in lengths:
        ids = prompt(n, engine.config.vocab_size)
        for chunk in [*chunks, None]:
            engine.prefill_chunk = chunk or n
            plan = engine.memory_plan(n, new_tokens)
            engine.generate(ids, 1, stop_ids=[])  # warm-up
            g, measured = measure_peak_bytes(lambda: engine.generate(ids, 1, stop_ids=[]), device)
            times = [g.stats.prefill_ms] + [engine.generate(ids, 1, stop_ids=[]).stats.prefill_ms
                                            for _ in range(repeats - 1)]
            rows.append(dict(
                what="prefill", prompt_tokens=n, chunk="one-shot" if chunk is None else chunk,
                prefill_ms=statistics.median(times), activation_bytes=measured,
                plan_activation_bytes=plan.prefill_activation_bytes, kv_bytes=plan.kv_bytes,
                activation_over_kv=measured / plan.kv_bytes,
                bytes_per_prompt_token=(plan.kv_bytes + measured) / n,
                peak_bytes=plan.weights_bytes + plan.buffers_bytes + plan.kv_bytes + measured,
                plan_total_bytes=plan.total_bytes))
    for row in rows:  # time relative to one-shot at the same length
        one_shot = next(r for r in rows if r["prompt_tokens"] == row["prompt_tokens"] and r["chunk"] == "one-shot")
        row["vs_one_shot"] = row["prefill_ms"] / one_shot["prefill_ms"]
    return rows


def cap_trial(args) -> dict:
    """--cap-trial N: in a fresh process, capped before anything is allocated, one DFlash request of N
    prompt tokens. Trials share no process: in one process the earlier requests' freed blocks
    fragment the allocator and a run fails that fits on its own."""
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(args.cap_gb * GB / total)
    target, drafter = checkpoints(args.preset, Path(args.root))
    engine = tileinfer.load(target, draft=drafter, weights=args.weights, prefill_chunk=args.chunk,
                            memory_budget=math.inf)  # the real limit, not the plan's
    n = args.cap_trial
    try:
        engine.generate(prompt(n, engine.config.vocab_size, seed=n), args.new_tokens, stop_ids=[], accept_profile=args.accept)
        ok, error = True, ""
    except (torch.cuda.OutOfMemoryError, RuntimeError) as e:  # an OOM inside a graph capture may surface as RuntimeError
        ok, error = False, f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    return {"ok": ok, "peak_reserved_bytes": torch.cuda.max_memory_reserved(), "note": error}


def try_run(args, n, chunk):
    """(ok, peak reserved bytes, error) of a capped run in a fresh process."""
    cmd = [sys.executable, __file__, "--cap-trial", str(n), "--chunk", str(chunk), "--cap-gb", str(args.cap_gb),
           "--preset", args.preset, "--weights", args.weights, "--root", args.root,
           "--new-tokens", str(args.new_tokens), "--accept", str(args.accept)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return False, float("nan"), f"trial process failed: {done.stderr.strip().splitlines()[-1:]}"
    r = json.loads(lines[-1])
    return r["ok"], r["peak_reserved_bytes"], r["note"]


def cap_rows(engine, args, max_runs=4):
    """The plan's longest prompt under the cap, then real runs around it (binary search, ≤ max_runs)."""
    cap_bytes, new_tokens, chunk = int(args.cap_gb * GB), args.new_tokens, args.chunk
    limit = engine.config.max_position_embeddings - new_tokens
    engine.prefill_chunk = chunk
    planned = engine.memory_plan(1, new_tokens, budget_bytes=cap_bytes).longest_prompt()
    planned_one_shot = longest_one_shot(engine, cap_bytes, new_tokens)
    rows = [dict(what="cap: plan longest", chunk=chunk, prompt_tokens=planned, cap_bytes=cap_bytes),
            dict(what="cap: plan longest", chunk="one-shot", prompt_tokens=planned_one_shot, cap_bytes=cap_bytes)]
    if not torch.cuda.is_available():
        for r in rows:
            r["note"] = "plan only (no CUDA)"
        return rows
    ok_at, fail_at = 0, limit + 1
    n = planned
    for _ in range(max_runs - 1):
        if n <= ok_at or n >= fail_at:
            break
        ok, reserved, error = try_run(args, n, chunk)
        rows.append(dict(what="cap: real run", chunk=chunk, prompt_tokens=n, ok=ok, peak_reserved_bytes=reserved,
                         cap_bytes=cap_bytes, note=error))
        if ok:
            ok_at = n
            n = min(limit, n + 2048) if fail_at > limit else (n + fail_at) // 2
        else:
            fail_at = n
            n = (ok_at + n) // 2 if ok_at else n - 2048
    ok, reserved, error = try_run(args, planned_one_shot, planned_one_shot)
    rows.append(dict(what="cap: real run", chunk="one-shot", prompt_tokens=planned_one_shot, ok=ok,
                     peak_reserved_bytes=reserved, cap_bytes=cap_bytes, note=error))
    rows.append(dict(what="cap: measured longest", chunk=chunk, prompt_tokens=ok_at, cap_bytes=cap_bytes,
                     note=f"first failure at {fail_at}" if fail_at <= limit else "no failure up to the context"))
    return rows


def longest_one_shot(engine, cap_bytes, new_tokens):
    """The plan's longest prompt when the whole prompt is one chunk."""
    from tileinfer.memory import plan
    lo, hi = 0, engine.config.max_position_embeddings - new_tokens
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if plan(engine, mid, new_tokens, prefill_chunk=mid).total_bytes <= cap_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


def decode_row(engine, n, new_tokens, accept, chunk, device):
    reset_caches(engine)
    engine.prefill_chunk = chunk
    engine.memory_budget = math.inf
    ids = prompt(n, engine.config.vocab_size)
    plan = engine.memory_plan(n, new_tokens)
    # The first call allocates the caches and captures the step graphs: its peak above the caches is
    # prefill activations plus the graphs' pool.
    _, measured = measure_peak_bytes(lambda: engine.generate(ids, new_tokens, stop_ids=[], accept_profile=accept), device)
    measured -= plan.kv_bytes
    s = engine.generate(ids, new_tokens, stop_ids=[], accept_profile=accept).stats
    return dict(what="dflash decode", prompt_tokens=n, chunk=chunk, accept=f"replay:{accept}",
                decode_tok_s=s.decode_tok_s, step_ms=s.decode_ms / max(s.steps, 1), tokens_per_step=s.mean_tokens_per_step,
                prefill_ms=s.prefill_ms, activation_bytes=measured, plan_activation_bytes=plan.activation_bytes,
                kv_bytes=plan.kv_bytes, plan_total_bytes=plan.total_bytes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--preset", default="qwen3-4b")
    parser.add_argument("--weights", default="bf16")
    parser.add_argument("--lengths", default="8192,32768", help="prompt lengths, comma-separated")
    parser.add_argument("--chunks", default="2048,4096,8192", help="prefill chunks (one-shot is always added)")
    parser.add_argument("--chunk", type=int, default=4096, help="the chunk of the cap and decode runs")
    parser.add_argument("--cap-gb", type=float, default=16.0)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--accept", type=float, default=tokens_per_step("8k", "edit"),
                        help="replayed tokens per step (default: the comparison's edit at 8k)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--root", default=str(BENCH_ROOT), help="where the random checkpoints are kept")
    parser.add_argument("--cap-trial", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cap_trial is not None:
        print(json.dumps(cap_trial(args)))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    lengths = [int(x) for x in args.lengths.split(",")]
    chunks = [int(x) for x in args.chunks.split(",")]
    base = {**environment(measure_bandwidth=False), "command": command_line(), "weights_kind": "random",
            "preset": args.preset, "weights": args.weights, "new_tokens": args.new_tokens}
    t0 = time.perf_counter()
    target, drafter = checkpoints(args.preset, Path(args.root))
    engine = tileinfer.load(target, draft=drafter, weights=args.weights)
    print(f"checkpoint and engine ready in {time.perf_counter() - t0:.0f} s", flush=True)

    rows = prefill_rows(engine, lengths, chunks, args.new_tokens, args.repeats, device)
    print(f"prefill rows done at {time.perf_counter() - t0:.0f} s", flush=True)
    rows.append(decode_row(engine, max(lengths), args.new_tokens, args.accept, args.chunk, device))
    print(f"decode row done at {time.perf_counter() - t0:.0f} s", flush=True)
    rows += cap_rows(engine, args)
    print(f"cap rows done at {time.perf_counter() - t0:.0f} s", flush=True)

    rows = [{**base, **r} for r in rows]
    path = write_rows(rows, out / f"long_prompts_{gpu_tag(base['gpu'])}.csv", last=base)
    print(f"\n{base['gpu']}, torch {base['torch']}, triton {base['triton']}, rev {base['git_rev']}; "
          f"random {args.preset} + DFlash drafter, {args.weights}; rows in {path}")
    print(f"{'what':22} {'prompt':>7} {'chunk':>8} {'ms':>8} {'vs 1-shot':>9} {'act GB':>7} {'plan GB':>7} "
          f"{'act/KV':>6} {'KB/tok':>7} {'tok/s':>7} {'ok':>5}")
    for r in rows:
        def num(key, scale=1.0, fmt="7.3f"):
            v = r.get(key)
            return format(v / scale, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else " " * int(fmt.split(".")[0])
        plan_key = "plan_activation_bytes"
        print(f"{r['what'][:22]:22} {r['prompt_tokens']:>7} {str(r.get('chunk', '')):>8} {num('prefill_ms', 1, '8.1f')} "
              f"{num('vs_one_shot', 1, '9.3f')} {num('activation_bytes', GB)} {num(plan_key, GB)} "
              f"{num('activation_over_kv', 1, '6.3f')} {num('bytes_per_prompt_token', 1e3, '7.1f')} "
              f"{num('decode_tok_s', 1, '7.1f')} {str(r.get('ok', '')):>5}")


if __name__ == "__main__":
    main()

"""A long prompt's prefill, kernel by kernel, BF16 beside INT8: where INT8's extra prefill time goes.

Qwen3-shaped random checkpoint (bench/engine_bench.py writes it), prefilled eagerly in chunks as `generate`
does past the graph sizes. Per weights kind: the prefill's wall time (median of --repeats, after a warm-up)
and one profiled prefill's kernels, each name with its calls and GPU time, grouped into the trace's kernel
classes; each repeat's wall time and the SM clock after them (a clock that drops under load stretches the
wall), and the profiled prefill's timeline: its wall, its kernels' span and the idle time inside that span. Writes prefill_profile_<gpu>.csv (one row per weights × kernel name).

    python bench/prefill_profile.py --out $OUT --model qwen3-4b --tokens 8192
    python bench/prefill_profile.py --out pp --model tiny --tokens 300     # CPU smoke run
    python bench/prefill_profile.py --out $OUT --override '{"prefill_attention": {"tma": false}}'   # an A/B
    python bench/prefill_profile.py --out $OUT --weights bf16 --chunk 4096,8192                      # chunk sizes
    python bench/prefill_profile.py --out $OUT --weights int8 --defer-scales on,off,on,off          # INT8 scale passes
"""

import argparse
import gc
import itertools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tileinfer  # noqa: E402
from bench import tuned_override  # noqa: E402
from bench.engine_bench import checkpoints  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from bench.ref.tileinfer_spec import BENCH_ROOT  # noqa: E402
from tileinfer.engine import DEFAULT_PREFILL_CHUNK  # noqa: E402
from tileinfer.ops.linear import DEFER_SCALES  # noqa: E402
from tileinfer_profiling.busy import busy_time  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402
from tileinfer_profiling.trace import kernel_class  # noqa: E402

PROVENANCE = ("gpu", "gpu_bandwidth_gbs", "torch", "triton", "git_rev", "command", "weights_kind")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prefill_ms(engine, ids, repeats):
    """Median wall time of `repeats` prefills (drafter context included), after one warm-up, the median
    time the call takes to return (where the two agree, the host's launches or a wait inside the call set
    the pace and the GPU idles between kernels), and every repeat's wall time in order."""
    engine.prefill(ids)
    walls, hosts = [], []
    for _ in range(repeats):
        sync(engine.device)
        tic = time.perf_counter()
        engine.prefill(ids)
        hosts.append((time.perf_counter() - tic) * 1e3)
        sync(engine.device)
        walls.append((time.perf_counter() - tic) * 1e3)
    return statistics.median(walls), statistics.median(hosts), walls


def busy_and_span(intervals):
    """(time covered by the union of (start, end) intervals, first start to last end), in their unit."""
    pairs = list(intervals)
    if not pairs:
        return 0.0, 0.0
    return busy_time(pairs), max(e for _, e in pairs) - min(s for s, _ in pairs)


def kernel_rows(engine, ids):
    """One profiled prefill: each kernel name's calls and own GPU time (CPU ops' self time off a GPU), and
    the profiled call's timeline: its wall time, the span from its first kernel's start to its last one's
    end, and how much of that span no kernel ran (NaN off a GPU)."""
    on_gpu = engine.device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CUDA if on_gpu else torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        tic = time.perf_counter()
        engine.prefill(ids)
        sync(engine.device)
        wall = (time.perf_counter() - tic) * 1e3
    rows = []
    for event in prof.key_averages():
        us = event.self_device_time_total if on_gpu else event.self_cpu_time_total
        if us > 0 and (not on_gpu or event.device_type == torch.autograd.DeviceType.CUDA):
            rows.append({"name": event.key, "kernel_class": kernel_class(event.key), "calls": event.count,
                         "gpu_ms": us / 1e3})
    timeline = {"profiled_wall_ms": wall, "kernel_span_ms": float("nan"), "idle_in_span_ms": float("nan")}
    if on_gpu:
        busy, span = busy_and_span((e.time_range.start, e.time_range.end) for e in prof.events()
                                   if e.device_type == torch.autograd.DeviceType.CUDA)
        timeline |= {"kernel_span_ms": span / 1e3, "idle_in_span_ms": (span - busy) / 1e3}
    return sorted(rows, key=lambda r: -r["gpu_ms"]), timeline


def sm_clock_mhz(device):
    """The GPU's current SM clock (MHz) where NVML answers, else None."""
    try:
        return torch.cuda.clock_rate(device)
    except Exception:  # noqa: BLE001 - no NVML binding, or no GPU
        return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="qwen3-4b", help="random-weight preset")
    parser.add_argument("--weights", default="bf16,int8")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk", default=str(DEFAULT_PREFILL_CHUNK),
                        help="prefill chunk sizes in tokens, comma-separated: each runs in turn (its rows name it)")
    parser.add_argument("--defer-scales", default="on",
                        help="on/off, comma-separated, each run in turn: an INT8 product's scale applied by the "
                             "kernel that reads it (on) or in a pass of its own (off; linear.DEFER_SCALES); "
                             "BF16 runs once")
    parser.add_argument("--root", default=str(BENCH_ROOT), help="where the random checkpoints are kept")
    tuned_override.add_argument(parser)
    args = parser.parse_args(argv)
    weights = args.weights.split(",")
    unknown = [w for w in weights if w not in ("bf16", "int8")]
    if unknown:
        parser.error(f"--weights: unknown {', '.join(unknown)} (known: bf16, int8)")
    if args.tokens < 1 or args.repeats < 1:
        parser.error("--tokens and --repeats take counts >= 1")
    try:
        chunks = [int(c) for c in args.chunk.split(",")]
    except ValueError:
        parser.error(f"--chunk: expected token counts separated by commas, got {args.chunk!r}")
    if min(chunks) < 1:
        parser.error(f"--chunk: chunk sizes must be >= 1, got {args.chunk!r}")
    defers = args.defer_scales.split(",")
    if any(d not in ("on", "off") for d in defers):
        parser.error(f"--defer-scales: on or off, comma-separated, got {args.defer_scales!r}")
    patch = tuned_override.from_args(parser, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = {**environment(measure_bandwidth=torch.cuda.is_available()), "command": command_line(),
            "weights_kind": "random", "override": tuned_override.label(patch)}
    target, drafter = checkpoints(args.model, Path(args.root))
    rows = []
    initial = DEFER_SCALES.on
    try:
        with tuned_override.overridden(patch):  # eager prefills read the tuned values at each launch
            runs = [(kind, chunk, defer) for kind, chunk, (i, defer) in itertools.product(weights, chunks, enumerate(defers))
                    if kind == "int8" or i == 0]
            for kind, chunk, defer in runs:
                DEFER_SCALES.set(defer == "on")
                engine = tileinfer.load(target, draft=drafter, weights=kind, prefill_chunk=chunk)
                if args.tokens > engine.config.max_position_embeddings:
                    parser.error(f"--tokens {args.tokens} is past the model's {engine.config.max_position_embeddings} positions")
                ids = torch.randint(0, engine.config.vocab_size, (args.tokens,), generator=torch.Generator().manual_seed(0))
                wall, host, walls = prefill_ms(engine, ids.tolist(), args.repeats)
                clock = sm_clock_mhz(engine.device) if engine.device.type == "cuda" else None
                kernels, timeline = kernel_rows(engine, ids.tolist())
                key = {"model": args.model, "weights": kind, "tokens": args.tokens, "chunk": engine.prefill_chunk,
                       "defer_scales": defer if kind == "int8" else "-",
                       "prefill_ms": wall, "host_ms": host, "kernel_ms": sum(r["gpu_ms"] for r in kernels),
                       "prefill_walls_ms": " ".join(f"{w:.2f}" for w in walls), "sm_clock_mhz": clock, **timeline}
                rows.extend({**key, **r, **base} for r in kernels)
                scales = f", scales {'deferred' if defer == 'on' else 'in passes'}" if kind == "int8" else ""
                print(f"{args.model} {kind} {args.tokens} tokens in chunks of {chunk}{scales}: prefill {wall:.1f} ms "
                      f"(the call returns after {host:.1f} ms; repeats {key['prefill_walls_ms']}; SM clock after them {clock} MHz), kernels "
                      f"{key['kernel_ms']:.1f} ms; the profiled call {timeline['profiled_wall_ms']:.1f} ms, its kernels "
                      f"span {timeline['kernel_span_ms']:.1f} ms with {timeline['idle_in_span_ms']:.1f} ms idle", flush=True)
                for cls in ("gemm", "attention", "norm_rope", "other"):
                    print(f"  {cls:9s} {sum(r['gpu_ms'] for r in kernels if r['kernel_class'] == cls):8.2f} ms", flush=True)
                for r in kernels[:12]:
                    print(f"  {r['gpu_ms']:8.2f} ms {r['calls']:5d}x  {r['name'][:110]}", flush=True)
                del engine
                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
    finally:
        DEFER_SCALES.set(initial)
    path = write_rows(rows, out / f"prefill_profile_{gpu_tag(base['gpu'])}.csv", last=PROVENANCE)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

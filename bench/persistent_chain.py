"""What a persistent decode step can win: a decoder's one-token step with the attention aside, launched
kernel by kernel against one persistent launch, beside the bytes' floor (one H200 call, ~1-2 min).

Per Qwen3 shape, every layer's qkv, o, gate_up and down projections (random bf16, or int8 with per-row
scales; the real shapes, stacked over layers) with the RMSNorms before qkv and gate_up, the residual adds
after o and down and the SwiGLU, o reading q's rows where the attention's output would be
(`tileinfer.ops.gemv_chain`):
- `launched`: the engine's GEMM kernel per projection with the norm, add and SwiGLU inside
  (`skinny_gemm(norm=…, residual=…, swiglu=…)`), its tuned configs, PDL as the engine sets it, inside a
  CUDA graph: four launches a layer, as a decode step has besides its attention;
- `persistent`: `gemv_chain`, one launch, a grid barrier between phases (`--prefetch N`: each program
  asks L2 for the first N weight blocks it reads in the next phase before it waits);
- `floor`: the weights' bytes over the read bandwidth measured in the same run.
Each path is checked against `gemv_chain_ref` on two layers first. The rows give µs a layer, the cost a
layer beyond the floor (the issue's fixed cost: ~17 µs on the 4B shape in the decode step) and the cost
a phase beyond it. Writes persistent_chain_<gpu>.csv under --out and prints a table.

    python3 bench/persistent_chain.py --out bench/results [--models 0.6b,1.7b,4b,8b] [--weights bf16,int8]
        [--prefetch 0,2,8]
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tileinfer.ops import pdl  # noqa: E402  (before Triton: tileinfer.ops decides interpreting)
from tileinfer.ops.gemv_chain import barrier_stalled, gemv_chain, gemv_chain_ref  # noqa: E402
from tileinfer.ops.skinny_gemm import skinny_gemm  # noqa: E402
from tileinfer.shapes import QWEN3  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402
from tileinfer_profiling.timing import bench_us  # noqa: E402

PHASES = 4  # launches or barriers a layer: qkv, o, gate_up, down


def chain_weights(shape, layers, device, kind, seed=0):
    """(weights, norms, scales) of `layers` layers stacked: random bf16 scaled by 1/√K so the chain keeps its
    scale, or random int8 with per-row fp32 scales doing the same (scales None for bf16); the two norm
    weights [L, H] near 1."""
    g = torch.Generator(device=device).manual_seed(seed)
    norms = [(1.0 + 0.1 * torch.randn(layers, shape.hidden, generator=g, device=device)).to(torch.bfloat16)
             for _ in range(2)]
    h, q = shape.hidden, shape.q_heads * shape.head_dim
    dims = [(shape.qkv_rows, h), (h, q), (2 * shape.intermediate, h), (h, shape.intermediate)]
    if kind == "bf16":
        return [(torch.randn(layers, n, k, generator=g, device=device) / k**0.5).to(torch.bfloat16)
                for n, k in dims], norms, None
    weights = [torch.randint(-127, 128, (layers, n, k), generator=g, device=device, dtype=torch.int8) for n, k in dims]
    scales = [torch.full((layers, n), 1.0 / (73.0 * k**0.5), device=device) for n, k in dims]
    return weights, norms, scales


def launched_chain(x, weights, norms, scales):
    """The layers as the engine's kernels run them: one skinny GEMM launch per projection, the norm, the
    residual add or the SwiGLU inside it; x [H] is updated in place."""
    w_qkv, w_o, w_gate_up, w_down = weights
    stream = x[None, :]
    ko = w_o.shape[2]

    def scale(j, layer):
        return None if scales is None else scales[j][layer]

    def run():
        for layer in range(w_qkv.shape[0]):
            a = skinny_gemm(stream, w_qkv[layer], scale(0, layer), norm=norms[0][layer])
            skinny_gemm(a[:, :ko], w_o[layer], scale(1, layer), residual=stream)
            c = skinny_gemm(stream, w_gate_up[layer], scale(2, layer), swiglu=True, norm=norms[1][layer])
            skinny_gemm(c, w_down[layer], scale(3, layer), residual=stream)
        return x
    return run


def relative_error(out, ref):
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def measure_shape(name, kind, args, bandwidth, device):
    shape = QWEN3[name]
    weights, norms, scales = chain_weights(shape, shape.layers, device, kind)
    x0 = torch.randn(shape.hidden, device=device).to(torch.bfloat16)
    check = [w[:2].contiguous() for w in weights]
    check_norms = [g[:2].contiguous() for g in norms]
    check_scales = None if scales is None else [s[:2].contiguous() for s in scales]
    ref = gemv_chain_ref(x0, *check, *check_norms, scales=check_scales)
    errors = {"launched": relative_error(launched_chain(x0.clone(), check, check_norms, check_scales)(), ref)}
    barrier_stalled(device)
    for p in args.prefetch:
        errors[f"persistent:{p}"] = relative_error(
            gemv_chain(x0.clone(), *check, *check_norms, scales=check_scales, prefetch=p), ref)
    if barrier_stalled(device):
        raise SystemExit(f"{name}: a grid barrier gave up waiting (not every program resident?)")
    nbytes = sum(t.numel() * t.element_size() for t in weights + norms + (scales or []))
    floor_us = nbytes / bandwidth * 1e6
    layers = shape.layers
    rows = []

    def row(what, us, prefetch="-", programs="-"):
        over = (us - floor_us) / layers
        rows.append(dict(model=f"qwen3-{name}", weights=kind, layers=layers, what=what, prefetch=prefetch, programs=programs,
                         us_per_step=round(us, 2), us_per_layer=round(us / layers, 3), floor_us=round(floor_us, 2),
                         fraction_of_floor=round(floor_us / us, 4), us_per_layer_over_floor=round(over, 3),
                         us_per_phase_over_floor=round(over / PHASES, 3), weight_bytes=nbytes,
                         rel_error=round(errors.get(what if prefetch == "-" else f"{what}:{prefetch}", 0.0), 6),
                         pdl="on" if pdl.enabled_for(device) else "off"))
        print(f"{name:>5} {kind} {what:<11} prefetch {prefetch!s:>2}: {us:9.1f} µs  {us / layers:7.2f} µs/layer  "
              f"{floor_us / us:6.1%} of floor  {over:6.2f} µs/layer over", flush=True)

    row("floor", floor_us)
    us, _ = bench_us(launched_chain(x0.clone(), weights, norms, scales), device, rep_ms=args.rep_ms)
    row("launched", us)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    for p in args.prefetch:
        x = x0.clone()
        scratch = (x.new_empty(weights[0].shape[1]), x.new_empty(shape.intermediate))
        us, _ = bench_us(lambda: gemv_chain(x, *weights, *norms, scales=scales, prefetch=p, scratch=scratch), device,
                         rep_ms=args.rep_ms)
        row("persistent", us, p, sms)
    if barrier_stalled(device):
        raise SystemExit(f"{name}: a grid barrier gave up waiting while timed: the persistent rows are void")
    del weights, norms, scales
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for persistent_chain_<gpu>.csv")
    parser.add_argument("--models", default="0.6b,1.7b,4b,8b", help=f"Qwen3 shapes among {', '.join(QWEN3)}")
    parser.add_argument("--weights", default="bf16", help="bf16 and/or int8 (per-row scales), a list")
    parser.add_argument("--prefetch", default="0,2,8", help="weight blocks asked of L2 before each barrier, a list")
    parser.add_argument("--rep-ms", type=int, default=200, help="timing window per path")
    args = parser.parse_args(argv)
    models = args.models.split(",")
    unknown = [m for m in models if m not in QWEN3]
    if unknown:
        parser.error(f"--models: no Qwen3 shape {', '.join(unknown)} (known: {', '.join(QWEN3)})")
    try:
        args.prefetch = [int(p) for p in args.prefetch.split(",")]
    except ValueError:
        parser.error(f"--prefetch takes integers, got {args.prefetch!r}")
    args.weights = args.weights.split(",")
    if not set(args.weights) <= {"bf16", "int8"}:
        parser.error(f"--weights takes bf16 and int8, got {','.join(args.weights)}")
    if any(p < 0 for p in args.prefetch):
        parser.error(f"--prefetch takes blocks >= 0, got {args.prefetch}")
    if not torch.cuda.is_available():
        parser.error("the chain's timings need a GPU (the interpreter runs one phase a launch, no barriers)")
    device = torch.device("cuda")
    env = environment(measure_bandwidth=True)
    rows = []
    for name in models:
        for kind in args.weights:
            rows += measure_shape(name, kind, args, env["gpu_bandwidth_gbs"] * 1e9, device)
    base = {**env, "command": command_line(), "weights_kind": "random"}
    os.makedirs(args.out, exist_ok=True)
    path = write_rows([r | base for r in rows], os.path.join(args.out, f"persistent_chain_{gpu_tag(env['gpu'])}.csv"),
                      last=tuple(base))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

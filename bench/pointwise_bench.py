"""Check and time the pointwise ops (RMSNorm, QK-norm + RoPE, SwiGLU) at Qwen3-4B shapes on a GPU.

Each op runs against its PyTorch reference; both are timed inside a CUDA graph
(`triton.testing.do_bench_cudagraph`), each call reading a different copy of its inputs so that large
shapes do not sit in L2. Writes pointwise.csv under --out and prints a table.

With --norm-rope-tiles, instead: the prompt's Q/K norm + RoPE (`_qk_norm_rope_rows_kernel`, K/V written
into the cache) at a chunk of an 8k prompt, over tokens per program × warps, each tile's output checked
bit for bit against the default tile's, timed the same way; writes norm_rope_tiles_<gpu>.csv, the sweep
behind a GPU's "norm_rope" section.

    python3 bench/pointwise_bench.py --out results/
    python3 bench/pointwise_bench.py --out bench/results --norm-rope-tiles
"""

import argparse
import csv
import math
import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tileinfer.ops.rmsnorm import rms_norm, rms_norm_ref  # noqa: E402  (before Triton: tileinfer.ops decides interpreting)
from tileinfer.ops import rope  # noqa: E402
from tileinfer.ops.rope import qk_norm_rope, qk_norm_rope_ref, rope_cos_sin  # noqa: E402
from tileinfer.ops.swiglu import silu_mul, silu_mul_ref  # noqa: E402
from tileinfer.shapes import QWEN3_4B  # noqa: E402
from tileinfer_profiling.run_info import command_line, run_info  # noqa: E402
from bench.ref.metric import gpu_tag, write_rows  # noqa: E402
from triton.testing import do_bench_cudagraph  # noqa: E402

HIDDEN, INTERMEDIATE = QWEN3_4B.hidden, QWEN3_4B.intermediate
NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM = QWEN3_4B.q_heads, QWEN3_4B.kv_heads, QWEN3_4B.head_dim
EPS, THETA, MAX_POSITIONS = 1e-6, 1e6, 40960
NUM_TOKENS = (1, 16, 1024)
DTYPE = torch.bfloat16
L2_BYTES = 60 << 20
ATOL, RTOL = 1e-2, 1e-2


def _weight(n):
    return (1.0 + 0.1 * torch.randn(n, device="cuda")).to(DTYPE)


def rms_norm_case(T, with_residual=True):
    weight = _weight(HIDDEN)

    def make():
        x = torch.randn(T, HIDDEN, device="cuda", dtype=DTYPE)
        return (x, weight, EPS, torch.randn_like(x) if with_residual else None)

    row_bytes = HIDDEN * 2 * (4 if with_residual else 2)
    return make, rms_norm, rms_norm_ref, T * row_bytes + HIDDEN * 2


def qk_norm_rope_case(T):
    q_weight, k_weight = _weight(HEAD_DIM), _weight(HEAD_DIM)
    cos_sin = rope_cos_sin(HEAD_DIM, MAX_POSITIONS, THETA, device="cuda")
    heads = NUM_Q_HEADS + NUM_KV_HEADS

    def make():
        qkv = torch.randn(T, (heads + NUM_KV_HEADS) * HEAD_DIM, device="cuda", dtype=DTYPE)
        q = qkv[:, : NUM_Q_HEADS * HEAD_DIM].view(T, NUM_Q_HEADS, HEAD_DIM)
        k = qkv[:, NUM_Q_HEADS * HEAD_DIM: heads * HEAD_DIM].view(T, NUM_KV_HEADS, HEAD_DIM)
        positions = torch.randint(0, MAX_POSITIONS, (T,), device="cuda")
        return (q, k, q_weight, k_weight, cos_sin, positions, EPS)

    # q and k read and written, one cos/sin row (fp32) and one int64 position per token, two weights
    num_bytes = T * (2 * heads * HEAD_DIM * 2 + HEAD_DIM * 4 + 8) + 2 * HEAD_DIM * 2
    return make, qk_norm_rope, qk_norm_rope_ref, num_bytes


def silu_mul_case(T):
    def make():
        return (torch.randn(T, 2 * INTERMEDIATE, device="cuda", dtype=DTYPE),)

    return make, silu_mul, silu_mul_ref, T * 3 * INTERMEDIATE * 2


CASES = {
    "rms_norm+residual": rms_norm_case,
    "rms_norm": lambda T: rms_norm_case(T, with_residual=False),
    "qk_norm_rope": qk_norm_rope_case,
    "silu_mul": silu_mul_case,
}


def _max_err(out, ref):
    """Max abs error over the outputs, and whether all are within tolerance."""
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]
    refs = [r for r in (ref if isinstance(ref, tuple) else (ref,)) if r is not None]
    assert len(outs) == len(refs)
    err = max((o.float() - r.float()).abs().max().item() for o, r in zip(outs, refs))
    ok = all(torch.allclose(o.float(), r.float(), atol=ATOL, rtol=RTOL) for o, r in zip(outs, refs))
    return err, ok


def _time_us(fn, inputs):
    def run_all():
        for args in inputs:
            fn(*args)

    median, p20, p80 = do_bench_cudagraph(run_all, rep=50, quantiles=[0.5, 0.2, 0.8])
    return [1e3 * v / len(inputs) for v in (median, p20, p80)]


def bench_case(name, T):
    make, kernel, reference, num_bytes = CASES[name](T)
    # enough copies that one pass over them is ~2x L2; small shapes stay L2-resident as they would in the model
    copies = max(2, min(32, math.ceil(2 * L2_BYTES / num_bytes)))
    inputs = [make() for _ in range(copies)]
    err, ok = _max_err(kernel(*inputs[0]), reference(*inputs[0]))
    rows = []
    for impl, fn in (("triton", kernel), ("torch", reference)):
        median, p20, p80 = _time_us(fn, inputs)
        rows.append(dict(op=name, num_tokens=T, impl=impl, latency_us=round(median, 3),
                         latency_us_p20=round(p20, 3), latency_us_p80=round(p80, 3), bytes=num_bytes,
                         gb_per_s=round(num_bytes / median / 1e3, 1), copies=copies,
                         max_abs_err=err if impl == "triton" else 0.0, check_ok=ok))
    return rows


ROWS_TOKENS, ROWS_START = 4096, 4096  # the second chunk of an 8k prompt
TILE_SWEEP = [(t, w) for t in (16, 32, 64, 128) for w in (1, 2, 4, 8) if t * HEAD_DIM >= 4 * 32 * w]


def norm_rope_tiles(meta, out):
    """Every (tokens per program, warps) of the prompt's norm + RoPE, its K/V into the cache; rows by time."""
    T, heads = ROWS_TOKENS, NUM_Q_HEADS + 2 * NUM_KV_HEADS
    q_weight, k_weight = _weight(HEAD_DIM), _weight(HEAD_DIM)
    cos_sin = rope_cos_sin(HEAD_DIM, MAX_POSITIONS, THETA, device="cuda")
    positions = torch.arange(ROWS_START, ROWS_START + T, device="cuda")

    def make():
        qkv = torch.randn(T, heads * HEAD_DIM, device="cuda", dtype=DTYPE)
        q, k, v = (t.view(T, -1, HEAD_DIM) for t in qkv.split(
            [NUM_Q_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM], dim=1))
        cache = [torch.zeros(ROWS_START + T, NUM_KV_HEADS, HEAD_DIM, device="cuda", dtype=DTYPE) for _ in range(2)]
        return (q, k, q_weight, k_weight, cos_sin, positions, EPS, v, *cache)

    def call(q, k, qw, kw, cs, pos, eps, v, k_cache, v_cache):
        q_out, _ = qk_norm_rope(q, k, qw, kw, cs, pos, eps, v=v, k_cache=k_cache, v_cache=v_cache)
        return q_out, k_cache[ROWS_START:], v_cache[ROWS_START:]

    num_bytes = 2 * T * heads * HEAD_DIM * 2 + T * (HEAD_DIM * 4 + 8)
    inputs = [make() for _ in range(max(2, math.ceil(2 * L2_BYTES / num_bytes)))]
    own = rope.section
    rows, want = [], None
    try:
        for block_t, warps in [tuple(rope.ROWS_TILES.values())] + TILE_SWEEP:
            rope.section = lambda device, kernel, t=block_t, w=warps: {"block_t": t, "num_warps": w}
            got = [x.clone() for x in call(*inputs[0])]
            want = want or got
            median, p20, p80 = _time_us(call, inputs)
            rows.append(dict(op="qk_norm_rope rows + kv write", num_tokens=T, block_t=block_t, num_warps=warps,
                             latency_us=round(median, 3), latency_us_p20=round(p20, 3), latency_us_p80=round(p80, 3),
                             bytes=num_bytes, gb_per_s=round(num_bytes / median / 1e3, 1),
                             same_bits=all(torch.equal(g, w) for g, w in zip(got, want))))
    finally:
        rope.section = own
    rows = sorted({(r["block_t"], r["num_warps"]): r for r in rows}.values(), key=lambda r: r["latency_us"])
    os.makedirs(out, exist_ok=True)
    path = write_rows([{**r, **meta} for r in rows], os.path.join(out, f"norm_rope_tiles_{gpu_tag(meta['gpu'])}.csv"),
                      last=tuple(meta))
    print(f"wrote {path}\n{'block_t':>8} {'warps':>6} {'us':>8} {'GB/s':>7} same bits")
    for r in rows:
        print(f"{r['block_t']:>8} {r['num_warps']:>6} {r['latency_us']:>8.1f} {r['gb_per_s']:>7.0f} {r['same_bits']}")
    return all(r["same_bits"] for r in rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results", help="directory for pointwise.csv")
    parser.add_argument("--norm-rope-tiles", action="store_true",
                        help="sweep the prompt's Q/K norm + RoPE tiles instead (norm_rope_tiles_<gpu>.csv)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("pointwise_bench needs a CUDA GPU")
    torch.manual_seed(0)
    info = run_info()
    meta = {key: info[key] for key in ("gpu", "torch", "triton", "git_rev")} | {"command": command_line()}
    print(meta, flush=True)
    if args.norm_rope_tiles:
        sys.exit(0 if norm_rope_tiles(meta, args.out) else "a tile's output differs from the default tile's")

    rows, failures = [], []
    for name in CASES:
        for T in NUM_TOKENS:
            try:
                new = bench_case(name, T)
            except Exception:  # one op failing to compile should not hide the others' figures
                traceback.print_exc()
                failures.append(f"{name} T={T}: raised")
                continue
            rows += new
            if not new[0]["check_ok"]:
                failures.append(f"{name} T={T}: max abs err {new[0]['max_abs_err']:.3e}")
            print(f"done {name} T={T}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "pointwise.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) + list(meta) if rows else list(meta))
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, **meta})
    print(f"wrote {path}")

    print(f"\n{'op':<18} {'T':>5} {'triton us':>10} {'torch us':>9} {'speedup':>8} {'triton GB/s':>12} "
          f"{'torch GB/s':>11} {'max err':>9} check")
    by_key = {(r["op"], r["num_tokens"], r["impl"]): r for r in rows}
    for name in CASES:
        for T in NUM_TOKENS:
            tri, ref = by_key.get((name, T, "triton")), by_key.get((name, T, "torch"))
            if tri is None:
                print(f"{name:<18} {T:>5}  FAILED")
                continue
            print(f"{name:<18} {T:>5} {tri['latency_us']:>10.2f} {ref['latency_us']:>9.2f} "
                  f"{ref['latency_us'] / tri['latency_us']:>7.2f}x {tri['gb_per_s']:>12.0f} "
                  f"{ref['gb_per_s']:>11.0f} {tri['max_abs_err']:>9.2e} {'ok' if tri['check_ok'] else 'FAIL'}")
    if failures:
        print("FAILURES: " + "; ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()

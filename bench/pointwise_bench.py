"""Check and time the pointwise ops (RMSNorm, QK-norm + RoPE, SwiGLU) at Qwen3-4B shapes on a GPU.

Each op runs against its PyTorch reference; both are timed inside a CUDA graph
(`triton.testing.do_bench_cudagraph`), each call reading a different copy of its inputs so that large
shapes do not sit in L2. Writes pointwise.csv under --out and prints a table.

    python3 bench/pointwise_bench.py --out results/
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
from tileinfer.ops.rope import qk_norm_rope, qk_norm_rope_ref, rope_cos_sin  # noqa: E402
from tileinfer.ops.swiglu import silu_mul, silu_mul_ref  # noqa: E402
from tileinfer.shapes import QWEN3_4B  # noqa: E402
from tileinfer_profiling.run_info import command_line, run_info  # noqa: E402
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results", help="directory for pointwise.csv")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("pointwise_bench needs a CUDA GPU")
    torch.manual_seed(0)
    info = run_info()
    meta = {key: info[key] for key in ("gpu", "torch", "triton", "git_rev")} | {"command": command_line()}
    print(meta, flush=True)

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

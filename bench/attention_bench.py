"""GPU benchmark of TileInfer's attention kernels against attention_ref and PyTorch SDPA.

    python3 bench/attention_bench.py --out DIR      # writes DIR/attention.csv, prints a table last
    python3 bench/attention_bench.py --smoke        # tiny shapes (on a CPU: the Triton interpreter), no timing worth reading

Shapes are Qwen3-4B's heads (`tileinfer.shapes.QWEN3_4B`: 32 query heads, 8 KV heads, head_dim 128, bf16). Decode timings run inside
CUDA graphs with K/V rotated over enough cache copies (≥ 256 MB) that reads come from HBM, not the
60 MB L2; GB/s counts the K+V bytes read (kv_len × 8 heads × 128 × 2 B × 2).
"""

import argparse
import csv
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tileinfer.ops import INTERPRET  # noqa: E402  (imports Triton itself, interpreted without a GPU)
from tileinfer.ops.attention import attention_ref, default_num_splits  # noqa: E402
from tileinfer.ops.decode_attention import decode_attention  # noqa: E402
from tileinfer.ops.prefill_attention import prefill_attention  # noqa: E402
from tileinfer.shapes import QWEN3_4B  # noqa: E402
from tileinfer_profiling.run_info import command_line, run_info  # noqa: E402

SMOKE = "--smoke" in sys.argv
if SMOKE:
    NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, DTYPE = 8, 2, 16, torch.float32
    DEVICE = "cpu" if INTERPRET else "cuda"
    KV_LENS, PREFILL_LENS, ROTATE_BYTES = [130], [40], 1
    SPLIT_CURVE = [1, 3]
    DECODE_CONFIGS = [(64, 4, 3)]
    PREFILL_CONFIGS = [(32, 32, 4, 3)]
else:
    NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM = QWEN3_4B.q_heads, QWEN3_4B.kv_heads, QWEN3_4B.head_dim
    DTYPE, DEVICE = torch.bfloat16, "cuda"
    KV_LENS, PREFILL_LENS, ROTATE_BYTES = [1024, 8192, 32768], [1024, 8192], 256 << 20
    SPLIT_CURVE = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64]
    # (block_n, num_warps, num_stages)
    DECODE_CONFIGS = [(64, 4, 3), (64, 4, 4), (64, 8, 4), (128, 4, 3), (128, 8, 3), (32, 4, 4)]
    # (block_m, block_n, num_warps, num_stages)
    PREFILL_CONFIGS = [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (128, 64, 4, 3)]
QUERY_TOKENS = [1, 16]
TIME_BUDGET_S = 200.0
T0 = time.time()


def kv_bytes(kv_len):
    return kv_len * NUM_KV_HEADS * HEAD_DIM * 2 * torch.finfo(DTYPE).bits // 8


class Writer:
    FIELDS = [
        "section", "kernel", "kv_len", "num_q_tokens", "causal", "num_splits", "config", "time_us",
        "kv_gbps", "tflops", "max_abs_err", "ok", "note", "gpu", "torch", "triton", "git_rev", "command",
    ]

    def __init__(self, path):
        self.file = open(path, "w", newline="")
        self.csv = csv.DictWriter(self.file, self.FIELDS)
        self.csv.writeheader()
        info = run_info(DEVICE)
        self.common = {key: info[key] for key in ("gpu", "torch", "triton", "git_rev")} | {"command": command_line()}
        self.rows = []

    def row(self, **fields):
        fields = {**fields, **self.common}
        self.rows.append(fields)
        self.csv.writerow(fields)
        self.file.flush()


def time_us(fn, calls_per_fn=1):
    """Mean µs of one call; fn makes calls_per_fn calls (one per cache copy)."""
    if SMOKE:
        fn()
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e6 / calls_per_fn
    from triton.testing import do_bench_cudagraph
    return do_bench_cudagraph(fn, rep=10) * 1e3 / calls_per_fn


def over_budget():
    return time.time() - T0 > TIME_BUDGET_S


class Caches:
    """Several copies of a KV cache of kv_len positions, and q for T tokens."""

    def __init__(self, kv_len):
        self.kv_len = kv_len
        self.copies = max(1, min(128, math.ceil(ROTATE_BYTES / kv_bytes(kv_len))))
        shape = (self.copies, kv_len, NUM_KV_HEADS, HEAD_DIM)
        self.k = torch.randn(shape, dtype=DTYPE, device=DEVICE)
        self.v = torch.randn(shape, dtype=DTYPE, device=DEVICE)
        self.kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device=DEVICE)

    def q(self, num_q_tokens, seed=0):
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        return torch.randn(num_q_tokens, NUM_Q_HEADS, HEAD_DIM, dtype=DTYPE, device=DEVICE, generator=g)


def decode_fn(caches, q, num_splits, config, causal=True):
    block_n, num_warps, num_stages = config

    def fn():
        for i in range(caches.copies):
            decode_attention(q, caches.k[i], caches.v[i], caches.kv_len_t, causal=causal, num_splits=num_splits,
                             block_n=block_n, num_warps=num_warps, num_stages=num_stages)
    return fn


def sdpa_fn(caches, q, causal):
    """SDPA on the same cache layout: [L, H, D] viewed as [1, H, L, D]; GQA without copying K/V."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    qh = q.transpose(0, 1).unsqueeze(0)
    num_q_tokens = q.shape[0]
    backends = [SDPBackend.MATH] if SMOKE else [SDPBackend.FLASH_ATTENTION]
    variants = []
    if causal and num_q_tokens > 1:
        variants.append(("causal_lower_right", dict(attn_mask=causal_lower_right(num_q_tokens, caches.kv_len))))
        variants.append(("non-causal stand-in", dict()))
        variants.append(("bool mask (not flash)", None))
    else:
        variants.append(("", dict()))
    errors = []
    ref = attention_ref(q, caches.k[0], caches.v[0], caches.kv_len, causal)
    for note, kwargs in variants:
        if kwargs is None:
            pos = torch.arange(caches.kv_len, device=DEVICE)
            mask = pos[None, :] <= (pos[-num_q_tokens:])[:, None]
            kwargs, use_backends = dict(attn_mask=mask), [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        else:
            use_backends = backends

        def fn(kwargs=kwargs, use_backends=use_backends):
            with sdpa_kernel(use_backends):
                for i in range(caches.copies):
                    F.scaled_dot_product_attention(qh, caches.k[i].transpose(0, 1).unsqueeze(0),
                                                   caches.v[i].transpose(0, 1).unsqueeze(0), enable_gqa=True, **kwargs)
        try:
            fn()
            with sdpa_kernel(use_backends):
                got = F.scaled_dot_product_attention(qh, caches.k[0].transpose(0, 1).unsqueeze(0),
                                                     caches.v[0].transpose(0, 1).unsqueeze(0), enable_gqa=True, **kwargs)
            err = (got[0].transpose(0, 1).float() - ref.float()).abs().max().item()
            return fn, f"{note} max_abs_err {err:.1e}".strip()
        except Exception as e:  # noqa: BLE001 - try the next variant, report all if none works
            errors.append(f"{note}: {type(e).__name__}: {str(e)[:120]}")
    raise RuntimeError("; ".join(errors))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    out = Writer(os.path.join(args.out, "attention.csv"))
    print(f"{out.common['gpu']}  torch {out.common['torch']}  triton {out.common['triton']}  rev {out.common['git_rev']}")
    caches = {kv_len: Caches(kv_len) for kv_len in KV_LENS}
    tol = 1e-4 if DTYPE == torch.float32 else 2e-2

    def log(msg):
        print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)

    # 1. correctness of the decode kernel against the reference (first cache copy).
    log("correctness")
    for kv_len, c in caches.items():
        for num_q_tokens in QUERY_TOKENS:
            q = c.q(num_q_tokens)
            for causal in (True, False) if num_q_tokens > 1 else (True,):
                ref = attention_ref(q, c.k[0], c.v[0], kv_len, causal)
                splits = sorted({1, 8, default_num_splits(kv_len, num_q_tokens), SPLIT_CURVE[-1]})
                for num_splits in splits:
                    for config in DECODE_CONFIGS[:1] + DECODE_CONFIGS[3:4]:
                        try:
                            got = decode_attention(q, c.k[0], c.v[0], c.kv_len_t, causal=causal, num_splits=num_splits,
                                                   block_n=config[0], num_warps=config[1], num_stages=config[2])
                            err = (got.float() - ref.float()).abs().max().item()
                            out.row(section="check", kernel="decode", kv_len=kv_len, num_q_tokens=num_q_tokens,
                                    causal=causal, num_splits=num_splits, config=str(config), max_abs_err=err,
                                    ok=err < tol)
                        except Exception as e:  # noqa: BLE001
                            out.row(section="check", kernel="decode", kv_len=kv_len, num_q_tokens=num_q_tokens,
                                    causal=causal, num_splits=num_splits, config=str(config), ok=False,
                                    note=f"{type(e).__name__}: {str(e)[:200]}")
    for kv_len in PREFILL_LENS:
        # A head subset (8 query heads over 2 KV heads) keeps the fp32 reference small at 8k.
        for num_q_tokens in sorted({kv_len, min(kv_len, 1000)}):
            k = torch.randn(kv_len, 2, HEAD_DIM, dtype=DTYPE, device=DEVICE)
            v = torch.randn(kv_len, 2, HEAD_DIM, dtype=DTYPE, device=DEVICE)
            q = torch.randn(num_q_tokens, 8, HEAD_DIM, dtype=DTYPE, device=DEVICE)
            ref = attention_ref(q, k, v, kv_len, True)
            for config in PREFILL_CONFIGS:
                block_m, block_n, num_warps, num_stages = config
                try:
                    got = prefill_attention(q, k, v, kv_len, True, block_m=block_m, block_n=block_n,
                                            num_warps=num_warps, num_stages=num_stages)
                    err = (got.float() - ref.float()).abs().max().item()
                    out.row(section="check", kernel="prefill", kv_len=kv_len, num_q_tokens=num_q_tokens, causal=True,
                            config=str(config), max_abs_err=err, ok=err < tol)
                except Exception as e:  # noqa: BLE001
                    out.row(section="check", kernel="prefill", kv_len=kv_len, num_q_tokens=num_q_tokens, causal=True,
                            config=str(config), ok=False, note=f"{type(e).__name__}: {str(e)[:200]}")
    bad = [r for r in out.rows if r["section"] == "check" and not r["ok"]]
    log(f"correctness: {len(bad)} failures of {len(out.rows)}")
    for r in bad[:10]:
        print("  FAIL", {k: r.get(k) for k in ("kernel", "kv_len", "num_q_tokens", "causal", "num_splits", "config",
                                               "max_abs_err", "note")})

    def time_decode(section, kv_len, num_q_tokens, num_splits, config, causal=True):
        c = caches[kv_len]
        try:
            t = time_us(decode_fn(c, c.q(num_q_tokens), num_splits, config, causal), c.copies)
            out.row(section=section, kernel="decode", kv_len=kv_len, num_q_tokens=num_q_tokens, causal=causal,
                    num_splits=num_splits, config=str(config), time_us=t, kv_gbps=kv_bytes(kv_len) / t / 1e3)
            return t
        except Exception as e:  # noqa: BLE001
            out.row(section=section, kernel="decode", kv_len=kv_len, num_q_tokens=num_q_tokens, causal=causal,
                    num_splits=num_splits, config=str(config), note=f"{type(e).__name__}: {str(e)[:200]}")
            return float("inf")

    # 2. launch configs of the decode kernel at the long contexts.
    log("decode configs")
    best_config = {}
    for num_q_tokens in QUERY_TOKENS:
        totals = {}
        for config in DECODE_CONFIGS:
            totals[config] = 0.0
            for kv_len in KV_LENS[1:] or KV_LENS:
                for num_splits in (16, 32):
                    if not over_budget():
                        totals[config] += time_decode("config", kv_len, num_q_tokens, num_splits, config)
        best_config[num_q_tokens] = min(totals, key=totals.get)
        log(f"best config q{num_q_tokens}: {best_config[num_q_tokens]}")

    # 3. split-count curve.
    log("split curve")
    best_splits = {}
    for num_q_tokens in (16, 1):
        for kv_len in KV_LENS:
            times = {}
            for num_splits in SPLIT_CURVE:
                if not over_budget():
                    times[num_splits] = time_decode("splits", kv_len, num_q_tokens, num_splits,
                                                    best_config[num_q_tokens])
            if times:
                best_splits[(kv_len, num_q_tokens)] = min(times, key=times.get)

    # 4. ours (default splits, best config) against SDPA.
    log("decode vs sdpa")
    for kv_len, c in caches.items():
        for num_q_tokens in QUERY_TOKENS:
            if over_budget():
                continue
            time_decode("decode", kv_len, num_q_tokens, default_num_splits(kv_len, num_q_tokens),
                        best_config[num_q_tokens])
            try:
                fn, note = sdpa_fn(c, c.q(num_q_tokens), causal=True)
                t = time_us(fn, c.copies)
                out.row(section="decode", kernel="sdpa", kv_len=kv_len, num_q_tokens=num_q_tokens, causal=True,
                        time_us=t, kv_gbps=kv_bytes(kv_len) / t / 1e3, note=note)
            except Exception as e:  # noqa: BLE001
                out.row(section="decode", kernel="sdpa", kv_len=kv_len, num_q_tokens=num_q_tokens, causal=True,
                        note=f"{type(e).__name__}: {str(e)[:300]}")

    # 5. prefill against SDPA (compute bound: no rotation needed).
    log("prefill")
    for kv_len in PREFILL_LENS:
        q = torch.randn(kv_len, NUM_Q_HEADS, HEAD_DIM, dtype=DTYPE, device=DEVICE)
        k = torch.randn(kv_len, NUM_KV_HEADS, HEAD_DIM, dtype=DTYPE, device=DEVICE)
        v = torch.randn(kv_len, NUM_KV_HEADS, HEAD_DIM, dtype=DTYPE, device=DEVICE)
        flop = 4 * NUM_Q_HEADS * HEAD_DIM * kv_len * kv_len / 2  # causal: half the score matrix
        for config in PREFILL_CONFIGS:
            if over_budget():
                continue
            block_m, block_n, num_warps, num_stages = config
            try:
                t = time_us(lambda: prefill_attention(q, k, v, kv_len, True, block_m=block_m, block_n=block_n,
                                                      num_warps=num_warps, num_stages=num_stages))
                out.row(section="prefill", kernel="prefill", kv_len=kv_len, num_q_tokens=kv_len, causal=True,
                        config=str(config), time_us=t, tflops=flop / t / 1e6)
            except Exception as e:  # noqa: BLE001
                out.row(section="prefill", kernel="prefill", kv_len=kv_len, num_q_tokens=kv_len, causal=True,
                        config=str(config), note=f"{type(e).__name__}: {str(e)[:200]}")
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            backend = SDPBackend.MATH if SMOKE else SDPBackend.FLASH_ATTENTION
            qh, kh, vh = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))

            def sdpa():
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=True)
            t = time_us(sdpa)
            out.row(section="prefill", kernel="sdpa", kv_len=kv_len, num_q_tokens=kv_len, causal=True,
                    time_us=t, tflops=flop / t / 1e6)
        except Exception as e:  # noqa: BLE001
            out.row(section="prefill", kernel="sdpa", kv_len=kv_len, num_q_tokens=kv_len, causal=True,
                    note=f"{type(e).__name__}: {str(e)[:300]}")

    log("done")
    print_table(out.rows, best_config, best_splits)


def print_table(rows, best_config, best_splits):
    def fmt(x, spec):
        return format(x, spec) if isinstance(x, (int, float)) else "-"

    print("\nsplit curve (µs), q16 / q1:")
    for num_q_tokens in (16, 1):
        for kv_len in KV_LENS:
            pts = [(r["num_splits"], r["time_us"]) for r in rows
                   if r["section"] == "splits" and r["kv_len"] == kv_len and r["num_q_tokens"] == num_q_tokens]
            print(f"  q{num_q_tokens:<2} {kv_len:>6}: " + " ".join(f"{s}:{fmt(t, '.1f')}" for s, t in pts))
    print("\nconfigs (block_n, warps, stages), mean µs over 8k/32k × 16/32 splits:")
    for num_q_tokens in QUERY_TOKENS:
        by = {}
        for r in rows:
            if r["section"] == "config" and r["num_q_tokens"] == num_q_tokens and r.get("time_us"):
                by.setdefault(r["config"], []).append(r["time_us"])
        print(f"  q{num_q_tokens}: " + "  ".join(f"{c}:{sum(v) / len(v):.1f}" for c, v in by.items())
              + f"   best {best_config.get(num_q_tokens)}")
    checks = [r for r in rows if r["section"] == "check"]
    print(f"\ncorrectness: {sum(bool(r['ok']) for r in checks)}/{len(checks)} ok, max abs err "
          f"{max((r['max_abs_err'] for r in checks if isinstance(r.get('max_abs_err'), float)), default=float('nan')):.2e}")
    print(f"\n{'what':<30}{'kv_len':>8}{'q':>6}{'splits':>7}{'µs':>10}{'TB/s':>7}{'TFLOP/s':>9}  note")
    for r in rows:
        if r["section"] in ("decode", "prefill"):
            name = r["kernel"] + (f" {r['config']}" if r.get("config") else "")
            gbps = r.get("kv_gbps")
            print(f"{name:<30}{r['kv_len']:>8}{r['num_q_tokens']:>6}{str(r.get('num_splits', '')):>7}"
                  f"{fmt(r.get('time_us'), '10.1f')}{fmt(gbps / 1e3 if gbps else None, '7.2f')}"
                  f"{fmt(r.get('tflops'), '9.1f')}  {r.get('note', '')}")
    print("best splits (kv_len, q): " + ", ".join(f"{k}: {v}" for k, v in sorted(best_splits.items())))


if __name__ == "__main__":
    main()

"""The split-count sweep behind ``default_num_splits`` and ``exact_num_splits`` (one H200 call, ~40 s).

    python3 bench/attention_splits.py --out DIR     # DIR/attention_splits_h200.csv, a table last

Qwen3-4B heads (32 query, 8 KV, head_dim 128), bf16, random K/V, each call in a CUDA graph with the cache
rotated over copies (≥ 256 MB) so that K/V come from HBM. Plain: even shares of the KV length over
``num_splits``; exact: splits of ``split_size`` positions and the 64-row query tile of exact mode.
``--prefetch-rows -1,0,256``: each again with that many positions of every split asked of L2 before the
grid-dependency wait (-1 the whole split, the default; 0 none); ``--tma off,on``: K/V blocks also through
TMA descriptors; ``--tokens-per-program 16,4``: plain blocks of 16 tokens again in row blocks of that many
tokens a program (one token is always one program).
"""

import argparse
import csv
import itertools
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from tileinfer.ops.attention import exact_block_m  # noqa: E402
from tileinfer.ops.decode_attention import decode_attention  # noqa: E402
from tileinfer.shapes import QWEN3_4B  # noqa: E402
from tileinfer_profiling.run_info import command_line, run_info  # noqa: E402

H, KVH, D = QWEN3_4B.q_heads, QWEN3_4B.kv_heads, QWEN3_4B.head_dim
PLAIN_SPLITS = (2, 4, 6, 8, 12, 16, 24, 32)
EXACT_SPLIT_SIZES = (64, 128, 256, 512, 1024, 2048)
PLAIN_KV_LENS = (1024, 2048, 4096, 8192, 32768)
EXACT_KV_LENS = (1100, 4200, 8300)


def time_us(kv_len, num_q_tokens, **kw):
    from triton.testing import do_bench_cudagraph
    copies = max(2, min(64, math.ceil(256e6 / (kv_len * KVH * D * 4))))
    k = torch.randn(copies, kv_len + 64, KVH, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    q = torch.randn(num_q_tokens, H, D, dtype=torch.bfloat16, device="cuda")
    kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device="cuda")

    def fn():
        for i in range(copies):
            decode_attention(q, k[i], v[i], kv_len_t, **kw)
    return do_bench_cudagraph(fn, rep=20) * 1e3 / copies


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--prefetch-rows", default="-1",
                    help="positions of each split asked of L2 before PDL's wait, comma-separated (-1: all, 0: none)")
    ap.add_argument("--kv-lens", default=",".join(map(str, PLAIN_KV_LENS)), help="plain mode's KV lengths")
    ap.add_argument("--no-exact", action="store_true", help="leave out exact mode's split sizes")
    ap.add_argument("--tma", default="off", help="off, on or off,on: K/V blocks through TMA descriptors")
    ap.add_argument("--tokens-per-program", default="16",
                    help="plain blocks of 16 tokens in row blocks of these many tokens a program, comma-separated")
    args = ap.parse_args()
    try:
        prefetch = [int(x) for x in args.prefetch_rows.split(",")]
        kv_lens = [int(x) for x in args.kv_lens.split(",")]
        tma = [{"off": False, "on": True}[x] for x in args.tma.split(",")]
        per_program = [int(x) for x in args.tokens_per_program.split(",")]
        assert all(p >= -1 for p in prefetch) and all(n > 0 for n in kv_lens + per_program)
    except (ValueError, AssertionError, KeyError):
        ap.error(f"--prefetch-rows takes integers >= -1, --kv-lens and --tokens-per-program positive ones and "
                 f"--tma off/on, got {args.prefetch_rows!r}, {args.kv_lens!r}, {args.tokens_per_program!r}, "
                 f"{args.tma!r}")
    if not torch.cuda.is_available():
        raise SystemExit("attention_splits.py times CUDA kernels: run it on a GPU")
    info = {**run_info(), "command": command_line(), "weights_kind": "random"}
    rows = []
    for rows_ahead, by_tma in itertools.product(prefetch, tma):
        for kv_len in kv_lens:
            for t, per in [(1, 1)] + [(16, p) for p in per_program]:
                for s in PLAIN_SPLITS:
                    if s * 64 <= kv_len:
                        us = time_us(kv_len, t, num_splits=s, prefetch_rows=rows_ahead, tma=by_tma,
                                     tokens_per_program=per)
                        rows.append(dict(mode="plain", kv_len=kv_len, num_q_tokens=t, tokens_per_program=per,
                                         num_splits=s, split_size=0, prefetch_rows=rows_ahead, tma=by_tma,
                                         time_us=round(us, 2)))
        for kv_len in () if args.no_exact else EXACT_KV_LENS:
            for t in (1, 16):
                for size in EXACT_SPLIT_SIZES:
                    if 2 * size <= kv_len:
                        grid = kv_len // size + 2
                        us = time_us(kv_len, t, num_splits=grid, split_size=size, block_m=exact_block_m(H, KVH),
                                     prefetch_rows=rows_ahead, tma=by_tma)
                        rows.append(dict(mode="exact", kv_len=kv_len, num_q_tokens=t, tokens_per_program=t,
                                         num_splits=grid, split_size=size, prefetch_rows=rows_ahead, tma=by_tma,
                                         time_us=round(us, 2)))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "attention_splits_h200.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*rows[0], *info])
        w.writeheader()
        for r in rows:
            w.writerow({**r, **info})
    print(f"{info['gpu']}, torch {info['torch']}, triton {info['triton']}, rev {info['git_rev']}; random K/V; {path}")
    for mode in ("plain", "exact"):
        keys = ("kv_len", "num_q_tokens", "tokens_per_program", "prefetch_rows", "tma")
        for key in dict.fromkeys(tuple(r[k] for k in keys) for r in rows if r["mode"] == mode):
            rs = [r for r in rows if r["mode"] == mode and tuple(r[k] for k in keys) == key]
            label = "split_size" if mode == "exact" else "num_splits"
            print(f"{mode} kv {key[0]:6} T {key[1]:2}/{key[2]:2} ahead {key[3]:5} tma {'on ' if key[4] else 'off'}  "
                  + "  ".join(f"{r[label]}:{r['time_us']:.1f}" for r in rs))


if __name__ == "__main__":
    main()

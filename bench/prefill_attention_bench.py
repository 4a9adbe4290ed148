"""The prefill attention's variants at a prompt's chunk shapes, beside SDPA (flash, cuDNN).

    python bench/prefill_attention_bench.py --out DIR     # DIR/prefill_attention_<gpu>.csv, a table last
    python bench/prefill_attention_bench.py --smoke       # tiny shapes (on a CPU: the Triton interpreter)

Qwen3-4B's heads (32 query, 8 KV, head_dim 128), bf16, causal, random inputs. The engine prefills a long
prompt in chunks of 4,096 tokens: an 8k prompt's chunks are 4,096 queries over 4,096 keys, then 4,096 over
8,192 (the first half its prefix). Each variant (tiles, warps, stages, longest-first order, the lean softmax
tile, tiles moved by TMA descriptors) is checked against the default's output and timed in a CUDA graph (`tileinfer_profiling.timing.bench_us`;
compute-bound: no rotation past L2); TFLOP/s count the visible half of the scores: 4 · heads · head_dim · Σ keys seen.
"""

import argparse
import itertools
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.ref.metric import gpu_tag, write_rows  # noqa: E402
from tileinfer.ops import INTERPRET  # noqa: E402
from tileinfer.ops.prefill_attention import prefill_attention, tma_loads_fit  # noqa: E402
from tileinfer.shapes import QWEN3_4B  # noqa: E402
from tileinfer_profiling.run_info import command_line, run_info  # noqa: E402
from tileinfer_profiling.timing import bench_us  # noqa: E402

PROVENANCE = ("gpu", "device", "torch", "triton", "git_rev", "command", "inputs")
TILES = ((64, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (64, 128, 4, 3))  # block_m, block_n, warps, stages


def _pairs(text: str) -> list[tuple[int, int]]:
    """'4096/8192,1024' -> [(4096, 8192), (1024, 1024)]: queries over keys."""
    out = []
    for item in text.split(","):
        q, _, k = item.partition("/")
        try:
            pair = (int(q), int(k or q))
        except ValueError:
            raise SystemExit(f"--chunks: queries[/keys], comma-separated, got {item!r}") from None
        if not 1 <= pair[0] <= pair[1]:
            raise SystemExit(f"--chunks: need 1 <= queries <= keys, got {item!r}")
        out.append(pair)
    return out


def visible_keys(num_q: int, kv_len: int) -> int:
    """Σ over a causal chunk's queries (the last num_q of kv_len positions) of the keys each one sees."""
    prefix = kv_len - num_q
    return num_q * prefix + num_q * (num_q + 1) // 2


def _sdpa_rows(q, k, v, flop, rep_ms):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qh, kh, vh = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        def run():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=True)
        try:
            us, timer = bench_us(run, qh.device, rep_ms=rep_ms)
            yield {"impl": f"sdpa {backend.name.lower()}", "ms": us / 1e3, "tflops": flop / us / 1e6, "timer": timer}
        except RuntimeError as e:  # a backend this build or GPU lacks
            yield {"impl": f"sdpa {backend.name.lower()}", "note": str(e).splitlines()[0][:200]}


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--chunks", default="4096/8192,4096/4096,1024/1024",
                        help="queries/keys of each chunk shape, comma-separated")
    parser.add_argument("--smoke", action="store_true", help="tiny heads and lengths, to check the script")
    args = parser.parse_args(argv)
    chunks, tiles = _pairs(args.chunks), TILES
    heads, kv_heads, head_dim, dtype, rep_ms = QWEN3_4B.q_heads, QWEN3_4B.kv_heads, QWEN3_4B.head_dim, torch.bfloat16, 40
    device = "cpu" if INTERPRET else "cuda"
    if args.smoke:
        chunks, tiles = [(40, 70)], ((16, 16, 4, 2), (32, 16, 4, 2))
        heads, kv_heads, head_dim, dtype, rep_ms = 4, 2, 16, torch.float32, 5
    base = {**run_info(device), "command": command_line(argv if argv is None else
                                                        ["bench/prefill_attention_bench.py", *argv]),
            "inputs": "random"}
    rows = []
    for num_q, kv_len in chunks:
        gen = torch.Generator().manual_seed(0)
        qkv, k, v = (torch.randn(n, h, head_dim, generator=gen).to(device, dtype)
                     for n, h in ((num_q, heads + 2 * kv_heads), (kv_len, kv_heads), (kv_len, kv_heads)))
        q = qkv[:, :heads]  # the engine's q: a view into the QKV projection's output
        flop = 4 * heads * head_dim * visible_keys(num_q, kv_len)
        key = {"num_q_tokens": num_q, "kv_len": kv_len, "num_q_heads": heads, "num_kv_heads": kv_heads,
               "head_dim": head_dim, "dtype": str(dtype).removeprefix("torch.")}
        reference = prefill_attention(q, k, v, kv_len, True, block_m=tiles[0][0], block_n=tiles[0][1],
                                      num_warps=tiles[0][2], num_stages=tiles[0][3], longest_first=False,
                                      fast_softmax=False, tma=False)
        variants = [(*t, lf, fast, False) for t, lf, fast in itertools.product(tiles, (False, True), (False, True))]
        variants += [(*t, True, True, True) for t in tiles]
        for bm, bn, warps, stages, longest_first, fast, tma in variants:
            def run():
                return prefill_attention(q, k, v, kv_len, True, block_m=bm, block_n=bn, num_warps=warps,
                                         num_stages=stages, longest_first=longest_first, fast_softmax=fast, tma=tma)
            err = (run().float() - reference.float()).abs().max().item()
            us, timer = bench_us(run, q.device, rep_ms=rep_ms)
            rows.append({**key, "impl": "ours", "block_m": bm, "block_n": bn, "num_warps": warps,
                         "num_stages": stages, "longest_first": longest_first, "fast_softmax": fast,
                         "tma": tma and tma_loads_fit(q, k, v),
                         "ms": us / 1e3,
                         "tflops": flop / us / 1e6, "max_abs_diff": err, "timer": timer, **base})
        if num_q == kv_len and device == "cuda":
            rows.extend({**key, **r, **base} for r in _sdpa_rows(q, k, v, flop, rep_ms))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_rows(rows, out / f"prefill_attention_{gpu_tag(base['gpu'])}.csv", last=PROVENANCE)
    print(f"\n{'queries':>7} {'keys':>6} {'impl':22} {'lf':>5} {'fast':>5} {'tma':>5} {'ms':>8} {'TFLOP/s':>8} {'diff':>9}")
    for r in rows:
        tile = (f"{r['block_m']}x{r['block_n']} w{r['num_warps']} s{r['num_stages']}" if r["impl"] == "ours"
                else r["impl"])
        print(f"{r['num_q_tokens']:7d} {r['kv_len']:6d} {tile:22} {str(r.get('longest_first', '-')):>5} "
              f"{str(r.get('fast_softmax', '-')):>5} {str(r.get('tma', '-')):>5} {r.get('ms', float('nan')):8.3f} "
              f"{r.get('tflops', float('nan')):8.1f} {r.get('max_abs_diff', float('nan')):9.2e}")
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()

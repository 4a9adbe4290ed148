"""The DFlash drafter's attention (16 non-causal queries over context + block) by split count, beside SDPA.

    python bench/drafter_attention_bench.py --out DIR     # DIR/drafter_attention_<gpu>.csv, a table last
    python bench/drafter_attention_bench.py --smoke       # tiny shapes (on a CPU: the Triton interpreter)

Qwen3-4B's heads and DFlash block; each point a CUDA-graph median with K/V rotated past L2
(`tileinfer_profiling.sweeps.drafter_attention_sweep`).
"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench.ref.metric import gpu_tag  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402
from tileinfer_profiling.sweeps import best_splits, drafter_attention_sweep  # noqa: E402


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"{flag}: comma-separated positive integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise SystemExit(f"{flag}: comma-separated positive integers, got {text!r}")
    return values


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--kv-lens", default="1024,8192,32768", help="context lengths, comma-separated")
    parser.add_argument("--splits", default="1,4,8,16,32", help="split counts, comma-separated")
    parser.add_argument("--smoke", action="store_true", help="tiny heads and lengths, to check the script")
    args = parser.parse_args(argv)
    kv_lens, splits = _ints(args.kv_lens, "--kv-lens"), _ints(args.splits, "--splits")
    shape = {}
    if args.smoke:
        kv_lens, splits = (40,), (1, 2)
        shape = dict(block_size=4, num_q_heads=4, num_kv_heads=2, head_dim=16, dtype=torch.float32, rep_ms=5)
    df = drafter_attention_sweep(kv_lens, splits, progress=True, **shape)
    df["command"] = command_line(argv if argv is None else ["bench/drafter_attention_bench.py", *argv])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"drafter_attention_{gpu_tag(str(df['gpu'].iloc[0]))}.csv"
    df.to_csv(path, index=False)
    ours = df[df["impl"] == "ours"]
    print(f"\n{'context':>8} {'splits':>6} {'µs':>8}")
    for _, r in ours.iterrows():
        print(f"{int(r['context_len']):8d} {int(r['num_splits']):6d} {r['time_us']:8.2f}")
    for _, r in df[df["impl"] == "sdpa"].iterrows():
        print(f"{int(r['context_len']):8d}   sdpa {r['time_us']:8.2f}")
    print(best_splits(df).to_string(index=False))
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()

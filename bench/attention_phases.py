"""Where the split-KV decode attention's time goes inside a CUDA graph: each program's `%globaltimer` at its
start, after PDL's wait, with q ready, after its K/V loop, after its arrival count and after the merge
(`decode_attention(stamps=)`), between the QKV projection that makes its q/k/v and the o projection after it.

    python bench/attention_phases.py --out bench/results [--points 1024:1,8192:1,1024:16] [--kv-first off,on]

A point is kv_len:T on Qwen3-4B heads (32 query, 8 KV, head_dim 128, bf16), with the engine's split count
and row blocks for it; one-token steps norm, rotate and write the step's K/V inside the attention (step_kv),
as the engine's decode steps do. Each graph holds `copies` QKV → attention → o chains over K/V copies of
≥ 256 MB (read from HBM); the stamps of the middle copy are read after a replay. Random weights. Writes
attention_phases_<gpu>.csv: per point and setting, the median over programs of each phase (µs), the
spread of the programs' starts and wait releases, and the attention's span from its first wait release
to its last program's end.
"""

import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from tileinfer.ops import decode_attention as da  # noqa: E402
from tileinfer.ops.attention import SplitPolicy  # noqa: E402
from tileinfer.ops.rope import rope_cos_sin  # noqa: E402
from tileinfer.ops.skinny_gemm import skinny_gemm  # noqa: E402
from tileinfer.ops.stamps import stamp_buffer  # noqa: E402
from tileinfer.shapes import QWEN3_4B  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402

ROPE_THETA = 1_000_000.0  # Qwen3's
PHASES = ("wait", "q ready", "K/V loop", "store + count", "merge")  # between stamps 0-1, 1-2, 2-3, 3-4, 4-5


def parse_points(text):
    try:
        points = [tuple(int(v) for v in p.split(":")) for p in text.split(",")]
        assert all(len(p) == 2 and p[0] > 0 and 1 <= p[1] <= 16 for p in points)
    except (ValueError, AssertionError):
        raise ValueError(f"points are kv_len:T with T in 1..16, comma-separated; got {text!r}") from None
    return points


def phase_row(stamps: torch.Tensor, scale: float) -> dict:
    """Median µs of each phase over the programs, the spreads of their starts and wait releases, and the
    span from the first wait release to the last program's end (`scale`: µs per stamp unit)."""
    ran = stamps[:, 1] > 0  # programs past the KV length leave after their first stamp
    # A slot older than its row's start was stamped by an earlier replay: the merge falls to whichever
    # program arrives last, not always the same one.
    stamped = (stamps[ran] > 0) & (stamps[ran] >= stamps[ran, :1])
    # ns since the epoch overflow a double's exact integers: times from the first start, taken in int64
    s = (stamps[ran] - stamps[ran, 0].min() + 1).double() * scale * stamped
    row = {}
    for i, name in enumerate(PHASES):
        done = stamped[:, i + 1]
        row[f"{name}_us"] = statistics.median((s[done, i + 1] - s[done, i]).tolist()) if done.any() else float("nan")
    ends = torch.where(stamped[:, 5], s[:, 5], s[:, 4])
    row.update(programs=int(ran.sum()), start_spread_us=(s[:, 0].max() - s[:, 0].min()).item(),
               release_spread_us=(s[:, 1].max() - s[:, 1].min()).item(), span_us=(ends.max() - s[:, 1].min()).item())
    return row


def measure(kv_len: int, t: int, kv_first: bool, device: str) -> dict:
    h, kvh, d, hidden = QWEN3_4B.q_heads, QWEN3_4B.kv_heads, QWEN3_4B.head_dim, QWEN3_4B.hidden
    policy = SplitPolicy.of(torch.device(device))
    splits, per_program = policy.num_splits(kv_len, t), policy.per_program(kv_len, t)
    step_kv = t == 1
    row_blocks = 1 if step_kv else -(-t // min(per_program, t))  # step_kv takes all T in one program
    programs = kvh * splits * row_blocks
    copies = max(3, min(32, math.ceil(256e6 / (kv_len * kvh * d * 4)))) if device == "cuda" else 1
    gen = torch.Generator(device=device).manual_seed(kv_len + t)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device).to(torch.bfloat16)
    caches = [(randn(kv_len + 16, kvh, d), randn(kv_len + 16, kvh, d)) for _ in range(copies)]
    w_qkv, w_o = randn((h + 2 * kvh) * d, hidden) * 0.02, randn(hidden, h * d) * 0.02
    x = randn(t, hidden)
    norm_w = (1 + 0.1 * randn(d).float()).bfloat16()
    cos_sin = rope_cos_sin(d, kv_len + 16, ROPE_THETA, device)
    positions = torch.arange(kv_len - t, kv_len, device=device)
    kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device=device)
    bufs = [stamp_buffer(programs, torch.device(device)) for _ in range(copies)]

    def chain():
        for (k, v), buf in zip(caches, bufs):
            qkv = skinny_gemm(x, w_qkv)
            q = qkv[:, :h * d].view(t, h, d)
            new = da.StepKV(qkv[:, h * d:(h + kvh) * d].view(t, kvh, d), qkv[:, (h + kvh) * d:].view(t, kvh, d),
                            norm_w, norm_w, cos_sin, positions, 1e-6) if step_kv else None
            out = da.decode_attention(q, k, v, kv_len_t, num_splits=splits, step_kv=new, stamps=buf,
                                      tokens_per_program=None if step_kv else per_program)
            skinny_gemm(out.view(t, h * d), w_o)

    was = da.KV_FIRST.on
    da.set_kv_first(kv_first)
    try:
        chain()  # compiles, and on a CPU is the run
        if device == "cuda":
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                chain()
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
    finally:
        da.set_kv_first(was)
    scale = 1e-3 if device == "cuda" else 1.0  # ns on a GPU; slot numbers under the interpreter
    return dict(kv_len=kv_len, num_q_tokens=t, num_splits=splits, step_kv="on" if step_kv else "off",
                kv_first="on" if kv_first else "off", **phase_row(bufs[copies // 2].cpu(), scale))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--points", default="1024:1,8192:1,1024:16")
    ap.add_argument("--kv-first", default="off,on", help="off, on or off,on: the first K/V block right after the wait")
    ap.add_argument("--smoke", action="store_true", help="CPU: the interpreter, stamps are slot numbers")
    args = ap.parse_args(argv)
    try:
        points = parse_points(args.points)
    except ValueError as e:
        ap.error(str(e))
    settings = args.kv_first.split(",")
    if not set(settings) <= {"off", "on"}:
        ap.error(f"--kv-first takes off and/or on, got {args.kv_first!r}")
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        sys.exit("attention_phases.py reads GPU timers: run it on a GPU, or with --smoke on a CPU")
    device = "cuda" if cuda else "cpu"
    env = environment(measure_bandwidth=False)
    meta = {**env, "command": command_line(), "weights_kind": "random"}
    rows = [{**measure(kv_len, t, setting == "on", device), **meta} for kv_len, t in points for setting in settings]
    os.makedirs(args.out, exist_ok=True)
    path = write_rows(rows, os.path.join(args.out, f"attention_phases_{gpu_tag(env['gpu'])}.csv"), last=tuple(meta))
    print(f"{env['gpu']}, torch {env['torch']}, triton {env['triton']}, rev {env['git_rev']}; random weights; {path}")
    print(f"{'kv_len':>6} {'T':>2} {'splits':>6} {'kvf':>3} " + " ".join(f"{p:>13}" for p in PHASES)
          + f" {'starts':>7} {'releases':>8} {'span':>6}  (µs, medians over programs)")
    for r in rows:
        print(f"{r['kv_len']:6} {r['num_q_tokens']:2} {r['num_splits']:6} {r['kv_first']:>3} "
              + " ".join(f"{r[p + '_us']:13.2f}" for p in PHASES)
              + f" {r['start_spread_us']:7.2f} {r['release_spread_us']:8.2f} {r['span_us']:6.2f}")
    return rows


if __name__ == "__main__":
    main()

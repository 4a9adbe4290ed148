"""What each stage of the split-KV decode attention costs (one H200 call, ~20 s once compiled).

    python bench/attention_stages.py --out DIR [--points 1024:1:8,1024:1:16,1024:16:8,8192:16:8]

The kernel as it is (`base`), then rewritten with one stage taken out at a time: `nomerge` (no program
merges the partials), `nocounter` (no arrival counter and no merge), `noload` (K/V tiles are zeros, not
loaded), `nowork` (every program leaves right after the grid-dependency wait), and `early_kv` (the first
K/V block read before that wait). Each point is kv_len:T:splits on Qwen3-4B heads (32 query, 8 KV,
head_dim 128, bf16, random K/V rotated over copies of ≥ 256 MB so they come from HBM), timed in a CUDA
graph alone and after the QKV projection whose output is q (`after_qkv`: the graph's time less the
projection's alone). The rewrites' outputs are wrong by design: they are only timed.
"""

import argparse
import csv
import importlib.util
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from tileinfer.shapes import QWEN3_4B  # noqa: E402
from tileinfer_profiling.run_info import command_line, run_info  # noqa: E402

SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tileinfer", "ops",
                      "decode_attention.py")
_MERGE = "if arrived == live_splits - 1:"
REWRITES = {
    "base": [],
    "nomerge": [(_MERGE, "if arrived == -1:")],
    "nocounter": [('arrived = tl.atomic_add(counter, 1, sem="acq_rel")', "arrived = -2"),
                  (_MERGE, "if arrived == -1:")],
    "noload": [("k = tl.load(k_ptrs, mask=n_valid[:, None], other=0.0)", "k = (k_ptrs.to(tl.int64) * 0).to(tl.bfloat16)"),
               ("v = tl.load(v_ptrs, mask=n_valid[:, None], other=0.0)", "v = (v_ptrs.to(tl.int64) * 0).to(tl.bfloat16)")],
    "nowork": [("            gdc_launch_dependents()\n    if STAMPS:",
                "            gdc_launch_dependents()\n    if kv_len > 0:\n        return\n    if STAMPS:")],
}
VARIANTS = (*REWRITES, "early_kv")
DEFAULT_POINTS = "1024:1:8,1024:1:16,1024:16:8,8192:16:8"


def rewritten(name: str, where: str):
    """decode_attention's module with REWRITES[name] applied to its source, imported from `where`."""
    src = open(SOURCE).read()
    for old, new in REWRITES[name]:
        if src.count(old) != 1:
            raise RuntimeError(f"variant {name}: {old!r} is not in decode_attention.py once; update REWRITES")
        src = src.replace(old, new)
    path = os.path.join(where, f"decode_attention_{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"decode_attention_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_points(text: str):
    try:
        points = [tuple(int(v) for v in p.split(":")) for p in text.split(",")]
        assert all(len(p) == 3 and p[0] > 0 and 1 <= p[1] <= 16 and p[2] >= 1 for p in points)
    except (ValueError, AssertionError):
        raise ValueError(f"points are kv_len:T:splits with T in 1..16, comma-separated; got {text!r}") from None
    return points


def time_us(module, kv_len, t, splits, after_qkv, early_kv=False):
    """µs per attention call (a graph of `copies` calls), after the QKV projection when `after_qkv`."""
    from triton.testing import do_bench_cudagraph

    from tileinfer.ops.skinny_gemm import skinny_gemm
    h, kvh, d = QWEN3_4B.q_heads, QWEN3_4B.kv_heads, QWEN3_4B.head_dim
    copies = max(4, min(64, math.ceil(256e6 / (kv_len * kvh * d * 4))))
    k = torch.randn(copies, kv_len + 64, kvh, d, dtype=torch.bfloat16, device="cuda")
    v = torch.randn_like(k)
    kv_len_t = torch.tensor([kv_len], dtype=torch.int32, device="cuda")
    x = torch.randn(t, QWEN3_4B.hidden, dtype=torch.bfloat16, device="cuda")
    w = [torch.randn((h + 2 * kvh) * d, QWEN3_4B.hidden, dtype=torch.bfloat16, device="cuda") * 0.02
         for _ in range(4 if after_qkv else 0)]
    q_alone = torch.randn(t, h, d, dtype=torch.bfloat16, device="cuda")

    def graph_body():
        for i in range(copies):
            q = skinny_gemm(x, w[i % len(w)])[:, :h * d].view(t, h, d) if after_qkv else q_alone
            if module is not None:
                module.decode_attention(q, k[i], v[i], kv_len_t, num_splits=splits, early_kv=early_kv)
    return do_bench_cudagraph(graph_body, rep=30) * 1e3 / copies


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--points", default=DEFAULT_POINTS, help="kv_len:T:splits, comma-separated")
    args = ap.parse_args(argv)
    try:
        points = parse_points(args.points)
    except ValueError as e:
        ap.error(str(e))
    if not torch.cuda.is_available():
        raise SystemExit("attention_stages.py times CUDA kernels: run it on a GPU")
    info = {**run_info(), "command": command_line(), "weights_kind": "random"}
    rows = []
    with tempfile.TemporaryDirectory() as where:
        modules = {name: rewritten(name, where) for name in REWRITES}
        modules["early_kv"] = modules["base"]
        modules["base"].set_early_kv(True)  # the rewrites' own switch: only the early_kv variant asks for it
        for kv_len, t, splits in points:
            for after_qkv in (False, True):
                qkv_us = time_us(None, kv_len, t, splits, True) if after_qkv else 0.0
                for name, module in modules.items():
                    us = time_us(module, kv_len, t, splits, after_qkv, early_kv=name == "early_kv") - qkv_us
                    rows.append(dict(kv_len=kv_len, num_q_tokens=t, num_splits=splits,
                                     context="after_qkv" if after_qkv else "alone", variant=name,
                                     time_us=round(us, 2), qkv_us=round(qkv_us, 2)))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "attention_stages_h200.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*rows[0], *info])
        writer.writeheader()
        writer.writerows({**r, **info} for r in rows)
    print(f"{info['gpu']}, torch {info['torch']}, triton {info['triton']}, rev {info['git_rev']}; random K/V; {path}")
    print(f"{'kv_len':>6} {'T':>2} {'splits':>6} {'context':9} " + " ".join(f"{v:>9}" for v in VARIANTS))
    for kv_len, t, splits in points:
        for context in ("alone", "after_qkv"):
            got = {r["variant"]: r["time_us"] for r in rows
                   if (r["kv_len"], r["num_q_tokens"], r["num_splits"], r["context"]) == (kv_len, t, splits, context)}
            print(f"{kv_len:6} {t:2} {splits:6} {context:9} " + " ".join(f"{got[v]:9.2f}" for v in VARIANTS))


if __name__ == "__main__":
    main()

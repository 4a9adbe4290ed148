"""How a skinny GEMM's time grows with its programs per SM: one launch config on [N, K] weights whose N
gives from half a program to four programs per SM, timed in CUDA graphs with the weights rotated past L2.

    python bench/gemm_waves.py --out bench/results [--linear gate_up] [--m 16] [--kinds bf16,int8]
                               [--config '{"prefetch_ahead": 8}']

The config is the GPU's tuned one for the Qwen3-4B linear (`--config` replaces some of its fields), the
epilogue the engine's (a gate_up with its SwiGLU). If what binds is the SM (its issue slots, shared memory,
load units), time follows the most programs an SM holds: it steps at each whole number per SM, and the
4B gate_up's 304 INT8 programs, 3 on 40 SMs and 2 on the other 92, take as long as 396 would; splitting
the same bytes into equal shares would then gain up to 1 - 2.3 / 3 of it. If each program's own chain of
dependent loads binds, time follows the bytes a program reads whatever the count, and a wave's tail costs
nothing. Random weights. Writes gemm_waves_<gpu>.csv: per kind and N, the programs, programs per SM, µs,
TB/s and the fraction of the byte floor at the read bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.gemm_bench import L2_DEFEAT_BYTES, time_us  # noqa: E402
from bench.ref.metric import environment, gpu_tag, write_rows  # noqa: E402
from tileinfer.ops import gemm_configs  # noqa: E402
from tileinfer.ops.linear import quantize_weight  # noqa: E402
from tileinfer.ops.skinny_gemm import launch_plan, skinny_gemm  # noqa: E402
from tileinfer.shapes import QWEN3_4B  # noqa: E402
from tileinfer_profiling.run_info import command_line  # noqa: E402

PER_SM = (0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4)  # programs per SM besides the linear's own count
LINEARS = {name: (n, k) for name, n, k in QWEN3_4B.linears()}


def weight_copies(n: int, k: int, kind: str, gen: torch.Generator, device: str) -> list[tuple]:
    """(weight[, scale]) copies of one [n, k] linear, enough to defeat L2 on a GPU (one on the CPU)."""
    copies = max(2, -(-L2_DEFEAT_BYTES // (n * k * (2 if kind == "bf16" else 1)))) if device == "cuda" else 1
    out = []
    for _ in range(copies):
        w = torch.randn(n, k, device=device, generator=gen).mul_(0.02).to(torch.bfloat16)
        out.append((w,) if kind == "bf16" else quantize_weight(w))
    return out


def sizes(real_n: int, rows_per_program: int, num_sms: int) -> list[int]:
    """N for each count of PER_SM programs per SM and the linear's own N, ascending, each a whole number of
    programs."""
    ns = {max(1, round(f * num_sms)) * rows_per_program for f in PER_SM} | {real_n}
    return sorted(ns)


def measure(linear: str, m: int, kind: str, patch: dict, num_sms: int, bandwidth_gbs: float, device: str,
            gen: torch.Generator, k: int | None = None, real_n: int | None = None) -> list[dict]:
    real_n, k = real_n or LINEARS[linear][0], k or LINEARS[linear][1]
    swiglu = linear == "gate_up"
    cfg = dataclasses.replace(gemm_configs.get_config(real_n, k, m, kind, torch.device(device)), **patch)
    rows_per_program = cfg.block_n * (2 if swiglu else 1)
    x = torch.randn(m, k, device=device, generator=gen).to(torch.bfloat16)
    rows = []
    for n in sizes(real_n, rows_per_program, num_sms):
        copies = weight_copies(n, k, kind, gen, device)
        want = x.float() @ (copies[0][0].float() * (copies[0][1][:, None] if kind == "int8" else 1)).T
        if swiglu:
            want = torch.nn.functional.silu(want[:, : n // 2]) * want[:, n // 2:]
        got = skinny_gemm(x, *copies[0], config=cfg, swiglu=swiglu).float()
        err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
        if not err < 2e-2:
            raise AssertionError(f"{linear} {kind} N={n}: rel err {err:.2e} against the fp32 product")
        us = time_us([lambda w=w: skinny_gemm(x, *w, config=cfg, swiglu=swiglu) for w in copies])
        nbytes = n * k * (2 if kind == "bf16" else 1) + (n * 4 if kind == "int8" else 0)
        grid = launch_plan(n // 2 if swiglu else n, k, cfg, torch.device(device), sms=num_sms).grid
        programs = grid[0] * grid[1]
        floor_us = nbytes / (bandwidth_gbs * 1e3) if bandwidth_gbs == bandwidth_gbs else float("nan")
        rows.append(dict(linear=linear, m=m, kind=kind, n=n, k=k, real=n == real_n, programs=programs,
                         programs_per_sm=round(programs / num_sms, 3), most_per_sm=math.ceil(programs / num_sms),
                         us=round(us, 3), tb_s=round(nbytes / us / 1e6, 3), floor_us=round(floor_us, 3),
                         fraction_of_floor=round(floor_us / us, 3), config=json.dumps(cfg.as_dict())))
        del copies
    return rows


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--linear", default="gate_up", choices=sorted(LINEARS))
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--kinds", default="bf16,int8")
    ap.add_argument("--config", default="{}", help="JSON fields replacing the tuned config's, e.g. {\"split_k\": 2}")
    ap.add_argument("--smoke", action="store_true", help="CPU: a tiny linear through the interpreter, 4 'SMs'")
    args = ap.parse_args(argv)
    kinds = args.kinds.split(",")
    if not set(kinds) <= {"bf16", "int8"}:
        ap.error(f"--kinds takes bf16 and/or int8, got {args.kinds!r}")
    if not 1 <= args.m <= 16:
        ap.error(f"--m takes 1..16 (the skinny GEMM's rows), got {args.m}")
    try:
        patch = json.loads(args.config)
        fields = {f.name for f in dataclasses.fields(gemm_configs.GemmConfig)}
        unknown = set(patch) - fields
        if not isinstance(patch, dict) or unknown:
            raise ValueError(f"unknown fields {sorted(unknown)} (known: {sorted(fields)})")
    except (ValueError, AttributeError) as e:
        ap.error(f"--config: {e}")
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        sys.exit("no CUDA device: run with --smoke for the CPU check")
    device = "cuda" if cuda else "cpu"
    env = environment(measure_bandwidth=cuda)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if cuda else 4
    gen = torch.Generator(device=device).manual_seed(0)
    small = {} if cuda else {"k": 64, "real_n": 96 if args.linear == "gate_up" else 48}
    rows = []
    for kind in kinds:
        rows += measure(args.linear, args.m, kind, patch, num_sms, env["gpu_bandwidth_gbs"], device, gen, **small)
    meta = {**env, "command": command_line(), "weights_kind": "random"}
    args.out.mkdir(parents=True, exist_ok=True)
    path = write_rows([{**r, **meta} for r in rows], args.out / f"gemm_waves_{gpu_tag(env['gpu'])}.csv",
                      last=tuple(meta))
    print(f"\n{env['gpu']}, torch {env['torch']}, triton {env['triton']}, rev {env['git_rev']}, read bandwidth "
          f"{env['gpu_bandwidth_gbs']} GB/s; random weights; {num_sms} SMs; rows in {path}")
    print(f"{'linear':8} {'M':>2} {'kind':4} {'N':>6} {'programs':>8} {'per SM':>6} {'most':>4} {'µs':>8} {'TB/s':>5} "
          f"{'of floor':>8}")
    for r in rows:
        print(f"{r['linear']:8} {r['m']:2} {r['kind']:4} {r['n']:6} {r['programs']:8} {r['programs_per_sm']:6.2f} "
              f"{r['most_per_sm']:4} {r['us']:8.2f} {r['tb_s']:5.2f} {r['fraction_of_floor']:8.2f}" + ("  <- the linear's own" if r["real"] else ""))
    return rows


if __name__ == "__main__":
    main()

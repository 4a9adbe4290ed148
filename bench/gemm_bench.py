"""Skinny-GEMM benchmark (and tuner) on Qwen3-4B's linears, timed inside CUDA graphs.

For qkv, o, gate_up, down and lm_head at M = 1, 4, 16 it times: ours BF16 (skinny_gemm), ours INT8
(W8A16 skinny), cuBLAS BF16 (F.linear) and torch's INT8 weight-only reference
(F.linear(x, w.to(bf16)) * s). Several weight copies are rotated so that the 60 MB L2 holds none of
them; effective TB/s = weight bytes read / time. Every variant is checked against an fp32 reference first.

    python3 bench/gemm_bench.py --out DIR            # measure with the GPU's configs (tileinfer/ops/configs)
    python3 bench/gemm_bench.py --tune --out DIR     # tune first (a small grid per shape x M bucket x
                                                     # weight kind), write the GPU's skinny_gemm configs, then measure
    python3 bench/gemm_bench.py --tune-only --models 0.6b,1.7b,4b,8b --ms 1,16 --kinds bf16 --out DIR
                                                     # tune those shapes only and merge the winners into the
                                                     # GPU's configs (entries not tuned are kept); add
                                                     # --linears lm_head to tune only those linears, or
                                                     # --from-installed to keep the installed tiles and
                                                     # tune only their L2 prefetch settings
    python3 bench/gemm_bench.py --smoke              # CPU: tiny shapes through the interpreter, no graphs

Tuning writes every candidate's time to DIR/gemm_tune_trials.csv, and tries each winner again as
stream-K (equal shares of all its K-blocks for 1, 2 or 3 programs an SM), then each winner with its first
2, 4 and 8 weight K-blocks prefetched into L2 before PDL's wait, then with each K-loop iteration asking L2
for the block 2, 4, 8 or 16 ahead.

A fused gate_up is tuned and timed as the engine runs it: with the SwiGLU epilogue. With `--folds` it also
times the layer's linears as `TILEINFER_FUSE_NORMS=1` runs them (the RMSNorm folded into qkv and gate_up,
its weight applied in the loop or carried by W; the residual add into o and down) beside the two launches
they replace (RMSNorm kernel, then the GEMM).

Writes DIR/gemm_h200.csv (one row per shape x M x variant, with GPU, versions, git revision, command)
and prints a short table last.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tileinfer.ops import gemm_configs, tuning  # noqa: E402  (imports Triton itself, interpreted without a GPU)
from tileinfer.ops.gemm_configs import M_BUCKETS, GemmConfig  # noqa: E402
from tileinfer.ops.linear import Linear, fold_norm_weight, quantize_weight  # noqa: E402
from tileinfer.ops.skinny_gemm import skinny_gemm  # noqa: E402
from tileinfer.ops.w8a16_gemm import w8a16_gemm_tiled  # noqa: E402
from tileinfer.ops.rmsnorm import rms_norm, rms_norm_ref  # noqa: E402
from tileinfer.ops.swiglu import silu_mul_ref  # noqa: E402
from tileinfer.shapes import QWEN3, QWEN3_4B, QWEN3_4B_DFLASH  # noqa: E402
from tileinfer_profiling.run_info import command_line, run_info  # noqa: E402

# name: (N, K); fc is the DFlash drafter's projection of the tapped hidden states
LINEARS = {name: (n, k) for name, n, k in QWEN3_4B.linears()} | {
    "lm_head": (QWEN3_4B.vocab, QWEN3_4B.hidden), "fc": QWEN3_4B_DFLASH.fc}
LAYER = tuple(name for name, _, _ in QWEN3_4B.linears())


def model_linears(sizes) -> dict:
    """name -> (N, K) of every distinct linear of the Qwen3 sizes (the 4B's drafter fc with the 4B); names
    carry the size when several are asked for."""
    out, seen = {}, set()
    for size in sizes:
        if size not in QWEN3:
            raise SystemExit(f"--models: unknown size {size!r} (known: {', '.join(QWEN3)})")
        shape = QWEN3[size]
        dims = [(name, n, k) for name, n, k in shape.linears()] + [("lm_head", shape.vocab, shape.hidden)]
        if size == "4b":
            dims.append(("fc", *QWEN3_4B_DFLASH.fc))
        for name, n, k in dims:
            if (n, k) not in seen:
                seen.add((n, k))
                out[name if len(sizes) == 1 else f"{size} {name}"] = (n, k)
    return out
SMOKE = {"qkv": (96, 64), "o": (64, 96), "gate_up": (160, 64), "down": (64, 160), "lm_head": (200, 64), "fc": (64, 320)}
L2_DEFEAT_BYTES = 256 << 20

# (block_n, block_k, num_warps, num_stages[, fast_i8[, k_warps]]); split_k is a runtime argument, searched separately.
# First H200 run (127707b): the BF16 winners were gemv 8-16 x 512 and dot 64 x 128 x 6 stages; INT8 with
# cvt conversions was conversion-bound (gate_up 2.3 TB/s), so INT8 now tries the integer-op conversion.
GRID = {
    ("gemv", "bf16"): [(4, 1024, 4, 4), (8, 512, 4, 4), (8, 512, 8, 4), (8, 1024, 4, 3), (16, 256, 4, 4),
                       (16, 256, 4, 6), (16, 512, 4, 3), (16, 512, 8, 4), (32, 256, 8, 4)],
    ("gemv", "int8"): [(8, 1024, 4, 4), (16, 512, 4, 4), (16, 1024, 4, 3), (16, 1024, 8, 4), (32, 512, 4, 4),
                       (32, 512, 8, 4), (64, 256, 4, 4), (8, 1024, 4, 4, False), (32, 512, 8, 4, False)],
    ("dot", "bf16"): [(32, 128, 4, 6), (32, 256, 4, 4), (64, 64, 4, 8), (64, 64, 4, 4), (64, 64, 4, 6),
                      (64, 128, 4, 4), (64, 128, 4, 6),
                      (64, 128, 8, 6), (64, 256, 4, 3), (128, 128, 4, 4), (128, 64, 4, 6),
                      (32, 128, 4, 4, True, 4), (32, 256, 8, 3, True, 8), (16, 256, 4, 4, True, 4),
                      (64, 128, 4, 4, True, 4)],
    ("dot", "int8"): [(32, 256, 4, 6), (32, 512, 4, 4), (64, 256, 4, 4), (64, 256, 4, 5), (64, 512, 4, 3),
                      (128, 256, 4, 4), (128, 128, 4, 6), (32, 512, 4, 4, False), (64, 256, 4, 4, False),
                      (32, 512, 2, 4, False), (32, 256, 2, 6, False), (64, 256, 2, 4, False),
                      (32, 128, 2, 4, False), (32, 128, 2, 3, False), (32, 64, 2, 6, False), (16, 128, 1, 4, False),
                      (32, 128, 4, 4, False, 4), (32, 256, 4, 3, False, 4), (32, 256, 8, 3, False, 8),
                      (64, 128, 4, 4, False, 4), (16, 256, 4, 4, False, 4), (32, 128, 2, 4, False, 2)],
}
# The 2-warp tiles 256-512 deep were added untimed: compiled for sm_90 (`tileinfer_profiling.compiled.gemm_variants`),
# the INT8 winners of the first tune (32 x 512, 4 warps) get a 2 x 2 warp layout on a 32 x 16 tile and
# convert every weight twice; with 2 warps each weight is converted once and the main loop's integer
# pipe needs ~0.57 of the byte floor's time instead of ~0.97 (down_proj, M = 16). Those tiles hold 83-124 KB of
# shared memory: 1-2 blocks of 2 warps per SM, half the SM's schedulers idle (gate_up 35 µs at M = 16 against
# a 6.7 µs instruction floor). The last four (untimed) keep the instruction floor within 10 % with 17-38 KB:
# 6-12 blocks per SM for qkv, o, down and gate_up (gemm_variants, sm_90).
# Still 2x the byte floor (gate_up 23.5 µs): 304 programs of 2 warps leave ~1 warp per scheduler. The last
# six split every K-block among the warps (k_warps, a batched dot): the same instructions a weight, 2-4x
# the warps per SM (`gemm_variants`, sm_90). On the H200 4x the warps bought 3 % (gate_up 22.9 -> 22.3 µs,
# bench/results/gemm_tune_int8_k_warps_h200.csv): latency is not what binds it. BF16 tries them too: its
# wgmma winner for the 4B gate_up holds 145 KB, one block per SM for 152 programs (1.15 waves).
# (64, 64, 4, 4-6) hold 74-110 KB: two blocks per SM, all 152 of the 4B gate_up's programs resident at once.
# Splits of 3 and 6 fill a wave where powers of two cannot: Qwen3-4B's o_proj has 40 tiles of 64 rows,
# × 3 = 120 programs on 132 SMs (× 4 = 160 is 1.2 waves); it read 2.3 TB/s at M = 16 against 3.2 for qkv.
SPLITS = (1, 2, 3, 4, 6, 8, 16)


def time_us(calls, trials: int = 5, min_calls: int = 24) -> float:
    """Median µs per call of `calls` (one closure per weight copy), replayed from one CUDA graph."""
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        for f in calls:
            f()
        return (time.perf_counter() - t0) / len(calls) * 1e6
    rounds = max(1, -(-min_calls // len(calls)))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for f in calls:
            f()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(rounds):
            for f in calls:
                f()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 10
    samples = []
    for _ in range(trials):
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / (reps * rounds * len(calls)))
    del graph
    return statistics.median(samples)


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


class Shape:
    """Weight copies (bf16 and int8) of one [N, K] linear, enough of them to defeat the L2."""

    def __init__(self, name: str, n: int, k: int, device: str, gen: torch.Generator, defeat_l2: bool = True):
        self.name, self.n, self.k = name, n, k
        self.swiglu = name.endswith("gate_up")
        # --smoke's tiny shapes would need tens of thousands of copies (and graphs as long) to fill 256 MB
        copies = max(2, -(-L2_DEFEAT_BYTES // (n * k * 2)) if defeat_l2 else 2) if device == "cuda" else 1
        self.w = [torch.randn(n, k, device=device, generator=gen).mul_(0.02).to(torch.bfloat16) for _ in range(copies)]
        self.q = [quantize_weight(w) for w in self.w]

    @property
    def bytes_bf16(self) -> int:
        return self.n * self.k * 2

    @property
    def bytes_int8(self) -> int:
        return self.n * self.k + self.n * 4

    def variants(self, x: torch.Tensor) -> dict:
        """name -> (list of closures over the copies, bytes read per call)."""
        return {
            "ours_bf16": ([lambda w=w: self.ours(x, w) for w in self.w], self.bytes_bf16),
            "ours_int8": ([lambda q=q: self.ours(x, *q) for q in self.q], self.bytes_int8),
            "cublas_bf16": ([lambda w=w: F.linear(x, w) for w in self.w], self.bytes_bf16),
            "torch_int8_ref": ([lambda q=q: F.linear(x, q[0].to(x.dtype)) * q[1] for q in self.q], self.bytes_int8),
        } | (self.argmax_variants(x) if self.name == "lm_head" else {})

    def argmax_variants(self, x: torch.Tensor) -> dict:
        """The LM head of a greedy step: ids with the argmax in our GEMM's epilogue, or after cuBLAS."""
        return {
            "ours_bf16_argmax": ([lambda w=w: skinny_gemm(x, w, argmax=True) for w in self.w], self.bytes_bf16),
            "ours_int8_argmax": ([lambda q=q: skinny_gemm(x, *q, argmax=True) for q in self.q], self.bytes_int8),
            "cublas_bf16_argmax": ([lambda w=w: F.linear(x, w).argmax(dim=-1) for w in self.w], self.bytes_bf16),
        }

    @property
    def folds_norm(self) -> bool:
        """qkv and gate_up follow an RMSNorm; o and down precede a residual add."""
        return self.name.endswith(("qkv", "gate_up"))

    def fold_variants(self, x: torch.Tensor, g: torch.Tensor, residual: torch.Tensor) -> dict:
        """name -> (closures over the copies, bytes, fp32 reference of one call on fresh buffers): the folded
        GEMM and what the unfolded engine runs instead. `residual` [M, N] is added to in place."""
        eps = 1e-6
        out = {}
        for kind, weights in (("bf16", [(w, None) for w in self.w]), ("int8", self.q)):
            nbytes = self.bytes_bf16 if kind == "bf16" else self.bytes_int8
            wf = self.reference_weight(kind)
            if self.folds_norm:
                normed = rms_norm_ref(x, g, eps)[0].float()
                ref = silu_mul_ref(normed @ wf.T) if self.swiglu else normed @ wf.T
                out[f"ours_{kind}_norm"] = (
                    [lambda w=w, s=sc: skinny_gemm(x, w, s, swiglu=self.swiglu, norm=g, eps=eps) for w, sc in weights],
                    nbytes, ref)
                folded = [fold_norm_weight(Linear(weight=w), g).weight for w in self.w]
                if kind == "int8":
                    folded = [quantize_weight(w) for w in folded]
                else:
                    folded = [(w, None) for w in folded]
                out[f"ours_{kind}_folded_norm"] = (
                    [lambda w=w, s=sc: skinny_gemm(x, w, s, swiglu=self.swiglu, unit_norm=True, eps=eps)
                     for w, sc in folded], nbytes, ref)
                out[f"ours_{kind}_rmsnorm_then_gemm"] = (
                    [lambda w=w, s=sc: skinny_gemm(rms_norm(x, g, eps)[0], w, s, swiglu=self.swiglu)
                     for w, sc in weights], nbytes, ref)
            else:
                ref = residual.float() + (x.float() @ wf.T).to(x.dtype).float()
                out[f"ours_{kind}_residual"] = (
                    [lambda w=w, s=sc: skinny_gemm(x, w, s, residual=residual) for w, sc in weights], nbytes, ref)
        return out

    def reference_weight(self, kind: str) -> torch.Tensor:
        if kind == "bf16":
            return self.w[0].float()
        q, s = self.q[0]
        return q.float() * s[:, None]

    def ours(self, x, w, scale=None, config=None):
        return skinny_gemm(x, w, scale, config=config, swiglu=self.swiglu)

    def reference(self, x: torch.Tensor, kind: str, fused: bool = False) -> torch.Tensor:
        """x @ W.T in fp32; `fused`: what ours returns for this shape (silu(gate) * up for a gate_up)."""
        if kind == "bf16":
            y = x.float() @ self.w[0].float().T
        else:
            q, s = self.q[0]
            y = x.float() @ (q.float() * s[:, None]).T
        return silu_mul_ref(y) if fused and self.swiglu else y


def candidates(path: str, kind: str, n: int, k: int, num_sms: int, extra=()):
    for bn, bk, warps, stages, *rest in [*GRID[(path, kind)], *extra]:
        fast, k_warps = (*rest, *(True, 1)[len(rest):])
        tiles = -(-n // bn)
        for split in SPLITS:
            if split > 1 and (tiles >= 4 * num_sms or k // split < 2 * bk):
                continue
            yield GemmConfig(block_n=bn, block_k=bk, split_k=split, num_warps=warps, num_stages=stages,
                             fast_i8=fast, k_warps=k_warps)


# Tried on each winner first: its tile with equal shares of all K-blocks for 1-3 programs an SM
# (`GemmConfig.stream_k`), where whole tiles leave SMs a wave's remainder (at M = 16 the 4B gate_up's 152
# BF16 programs of one block an SM, its 304 INT8 programs 3 on 40 SMs and 2 on the rest; at M = 1 the INT8
# qkv's 192 programs, 2 on 60 SMs and 1 on the rest).
STREAMS = (1, 2, 3)
PREFETCHES = (2, 4, 8)  # tried on each winner: weight K-blocks asked of L2 before PDL's wait
# Then on the winner of those: each K-loop iteration also asking L2 for the block this many ahead. At M = 16
# a program's bytes in flight are its pipeline's stages, which shared memory bounds (the INT8 gate_up's 2-3
# programs of 6 x 4 KB per SM each read 164 KB in 22.9 µs, ~7 GB/s); a prefetch holds no shared memory and no
# registers.
AHEADS = (2, 4, 8, 16)


# Larger tiles tried for an LM head with its argmax epilogue: each tile counts its arrival, so fewer tiles
# can beat the plain GEMV's winner (4 x 1024 on a 152k vocabulary is 38k tiles).
ARGMAX_GRID = {"gemv": [(32, 256, 4, 4), (64, 128, 4, 4), (64, 256, 8, 4), (32, 512, 8, 4), (128, 128, 8, 4)],
               "dot": []}


def tune(shapes: dict, device: str, budget_s: float, log, ms=M_BUCKETS, kinds=("bf16", "int8"),
         trials: list | None = None, installed: bool = False) -> dict:
    """Best config per shape x M bucket x weight kind, timed in graphs; returns the JSON table for this GPU.
    An LM head is tuned twice: as a plain product and with its argmax epilogue (entries "<kind>_argmax").
    Every candidate's time is appended to `trials` (shape, m, kind, config, µs, TB/s). `installed`: the
    GPU's installed config of each entry is the only tile tried (then its L2 prefetch settings), not the grid."""
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else 132
    table: dict = {}
    t0 = time.time()
    gen = torch.Generator(device=device).manual_seed(1)
    for (name, sh), m, kind in itertools.product(shapes.items(), ms, kinds):
        for argmax in (False, True) if name.endswith("lm_head") else (False,):
            entry = f"{kind}_argmax" if argmax else kind
            if time.time() - t0 > budget_s:
                log(f"tune: budget of {budget_s:.0f} s spent; {name} m{m} {entry} keeps the heuristic")
                continue
            x = torch.randn(m, sh.k, device=device, generator=gen).to(torch.bfloat16)
            best = _tune_one(sh, x, kind, argmax, num_sms, device, log, trials, installed)
            if best is None:
                continue
            us, cfg = best
            nbytes = sh.bytes_bf16 if kind == "bf16" else sh.bytes_int8
            log(f"tune: {name:8s} m{m:<2d} {entry}: {us:7.2f} µs {nbytes / us / 1e6:5.2f} TB/s  {cfg}  "
                f"[{time.time() - t0:.0f} s]")
            table.setdefault(f"{sh.n}x{sh.k}", {}).setdefault(f"m{m}", {})[entry] = cfg.as_dict()
    return table


def _tune_one(sh, x: torch.Tensor, kind: str, argmax: bool, num_sms: int, device: str, log, trials,
              installed: bool = False):
    """(µs, config) of the fastest correct candidate for one shape, M, weight kind and epilogue; `installed`:
    the candidates are the GPU's installed config alone."""
    m = x.shape[0]
    path = "gemv" if m == 1 else "dot"
    nbytes = sh.bytes_bf16 if kind == "bf16" else sh.bytes_int8
    copies = [(w,) for w in sh.w] if kind == "bf16" else sh.q
    want = sh.ours(x, *copies[0]).argmax(dim=-1) if argmax else sh.reference(x, kind, fused=True)

    def run(w, cfg):
        return skinny_gemm(x, *w, config=cfg, argmax=True) if argmax else sh.ours(x, *w, config=cfg)

    def wrong(y):
        return not torch.equal(y, want) if argmax else not rel_err(y, want) < 1e-2
    entry = f"{kind}_argmax" if argmax else kind

    def trial(cfg):
        try:
            bad = wrong(run(copies[0], cfg))
        except Exception as e:  # a config that does not compile (registers, shared memory) is skipped
            log(f"tune: {sh.name} m{m} {entry} {cfg} failed: {type(e).__name__}: {str(e)[:120]}")
            return None
        if bad:
            log(f"tune: {sh.name} m{m} {entry} {cfg} WRONG; skipped")
            return None
        us = time_us([lambda w=w: run(w, cfg) for w in copies], trials=3)
        if trials is not None:
            trials.append(dict(shape=sh.name, n=sh.n, k=sh.k, m=m, kind=entry, config=json.dumps(cfg.as_dict()),
                               us=round(us, 3), tb_s=round(nbytes / us / 1e6, 3)))
        return us

    best = None
    extra = ARGMAX_GRID[path] if argmax else ()
    tiles = ([gemm_configs.get_config(sh.n, sh.k, m, kind, x.device, argmax)] if installed
             else candidates(path, kind, sh.n, sh.k, num_sms, extra))
    for cfg in tiles:
        us = trial(cfg)
        if us is not None and (best is None or us < best[0]):
            best = (us, cfg)
    if best is None:
        return None
    sweeps = (("stream_k", () if argmax else STREAMS), ("prefetch_k", PREFETCHES),
              ("prefetch_ahead", AHEADS))
    for field, values in sweeps if device == "cuda" else ():
        start = best[1] if field != "stream_k" else dataclasses.replace(best[1], split_k=1)
        for value in values:
            cfg = dataclasses.replace(start, **{field: value})
            us = trial(cfg)
            if us is not None and us < best[0]:
                best = (us, cfg)
    return best


def install_table(gpu: str, table: dict, out: Path | None) -> None:
    """Merge this GPU's winners into the "skinny_gemm" section of its configs file (tileinfer/ops/configs,
    and a copy under --out beside the file as it was, `<gpu>.before.json`, for `floor_bench.py --configs`;
    entries not tuned now are kept) and reload the lookup."""
    before = tuning.config_path(gpu)
    if out is not None and before.exists():
        (out / f"{before.stem}.before.json").write_text(before.read_text())
    merged = json.loads(json.dumps(tuning.own_configs(gpu).get("skinny_gemm", {})))
    for shape, buckets in table.items():
        for bucket, kinds in buckets.items():
            merged.setdefault(shape, {}).setdefault(bucket, {}).update(kinds)
    path = tuning.write_section(gpu, "skinny_gemm", merged)
    if out is not None:
        (out / path.name).write_text(path.read_text())
    gemm_configs._lookup.cache_clear()


def fold_rows(shapes: dict, device: str, gen: torch.Generator, meta: dict, log) -> list[dict]:
    """The layer's linears with the RMSNorm or residual add folded in, checked then timed, at every M bucket."""
    rows = []
    for sh, m in itertools.product([shapes[name] for name in LAYER if name in shapes], M_BUCKETS):
        x = torch.randn(m, sh.k, device=device, generator=gen).to(torch.bfloat16)
        g = (1 + 0.1 * torch.randn(sh.k, device=device, generator=gen)).to(torch.bfloat16)
        residual = torch.randn(m, sh.n, device=device, generator=gen).to(torch.bfloat16)
        fresh = residual.clone()
        for vname, (calls, nbytes, ref) in sh.fold_variants(x, g, residual).items():
            residual.copy_(fresh)
            err = rel_err(calls[0](), ref)
            assert err < 2e-2, f"{vname} {sh.name} M={m}: rel err {err:.2e}"  # two bf16 roundings under SwiGLU
            us = time_us(calls)
            rows.append(dict(meta, shape=sh.name, n=sh.n, k=sh.k, m=m, variant=vname, us=round(us, 3),
                             tb_s=round(nbytes / us / 1e6, 3), bytes=nbytes, config=""))
    by = {(r["shape"], r["m"], r["variant"]): r["us"] for r in rows}
    log(f"\nfolds (µs): {'shape':8s} {'M':>3s} | {'kind':4s} | {'in loop':>8s} | {'in W':>8s} | {'norm + GEMM':>11s}")
    for (name, m, vname), us in by.items():
        if vname.endswith(("_norm", "_residual")) and "folded" not in vname:
            kind = vname.split("_")[1]
            two = by.get((name, m, f"ours_{kind}_rmsnorm_then_gemm"))
            in_w = by.get((name, m, f"ours_{kind}_folded_norm"))
            log(f"{'':12s} {name:8s} {m:3d} | {kind:4s} | {us:8.2f} | " + (f"{in_w:8.2f}" if in_w else f"{'-':>8s}")
                + " | " + (f"{two:11.2f}" if two else f"{'-':>11s}"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--tune-budget-s", type=float, default=240.0)
    ap.add_argument("--tune-only", action="store_true", help="tune, install the winners, measure nothing else")
    ap.add_argument("--from-installed", action="store_true",
                    help="with --tune-only: keep each entry's installed tile and tune only its L2 prefetch settings")
    ap.add_argument("--models", default="4b", help="Qwen3 sizes whose linears are tuned (with --tune-only)")
    ap.add_argument("--ms", default=",".join(map(str, M_BUCKETS)), help="M buckets to tune")
    ap.add_argument("--kinds", default="bf16,int8", help="weight kinds to tune")
    ap.add_argument("--linears", default=None,
                    help="with --tune-only: only these linears (qkv, o, gate_up, down, lm_head, fc; comma-separated)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (CPU interpreter check of this script)")
    ap.add_argument("--folds", action="store_true",
                    help="also time the RMSNorm / residual folds of TILEINFER_FUSE_NORMS=1 against the unfolded launches")
    args = ap.parse_args()
    ms = tuple(int(m) for m in args.ms.split(","))
    kinds = tuple(args.kinds.split(","))
    if not set(ms) <= set(M_BUCKETS) or not set(kinds) <= {"bf16", "int8"}:
        ap.error(f"--ms takes buckets of {M_BUCKETS}, --kinds bf16 and/or int8; got {args.ms!r}, {args.kinds!r}")
    if args.models != "4b" and not args.tune_only:
        ap.error("--models tunes other sizes' linears: use it with --tune-only (the measured table is the 4B's)")
    if args.linears and not args.tune_only:
        ap.error("--linears picks which linears to tune: use it with --tune-only")
    if args.from_installed and not args.tune_only:
        ap.error("--from-installed refines the installed configs: use it with --tune-only")
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    if not cuda and not args.smoke:
        sys.exit("no CUDA device: run with --smoke for the CPU check")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    log_file = open(args.out / "gemm_bench.log", "w") if args.out else None

    def log(msg: str) -> None:
        print(msg, flush=True)
        if log_file:
            log_file.write(msg + "\n")
            log_file.flush()

    info = run_info(device)
    gpu = info["gpu"]
    meta = {key: info[key] for key in ("gpu", "torch", "triton", "git_rev")} | {"command": command_line()}
    log(json.dumps(meta))
    dims = SMOKE if args.smoke else model_linears(args.models.split(",")) if args.tune_only else LINEARS
    if args.linears:
        wanted = set(args.linears.split(","))
        unknown = wanted - {name.split()[-1] for name in dims}
        if unknown:
            ap.error(f"--linears: unknown {', '.join(sorted(unknown))} (these sizes have {', '.join(dims)})")
        dims = {name: nk for name, nk in dims.items() if name.split()[-1] in wanted}
    gen = torch.Generator(device=device).manual_seed(0)
    t_setup = time.time()
    shapes = {name: Shape(name, n, k, device, gen, defeat_l2=not args.smoke) for name, (n, k) in dims.items()}
    log(f"weights ready in {time.time() - t_setup:.1f} s: " + ", ".join(f"{s.name} x{len(s.w)}" for s in shapes.values()))

    if args.tune or args.tune_only:
        trials = []
        table = tune(shapes, device, args.tune_budget_s, log, ms, kinds, trials, installed=args.from_installed)
        if args.out and trials:
            with open(args.out / "gemm_tune_trials.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(meta) + list(trials[0]))
                w.writeheader()
                w.writerows({**meta, **t} for t in trials)
        if cuda:
            install_table(gpu, table, args.out)
        log(f"tuned configs for {gpu} written ({sum(len(v) for v in table.values())} shape x M entries)")
    if args.tune_only:
        return

    # Correctness of every variant on fresh inputs, including the tiled W8A16 kernel at prefill M.
    worst = {}
    for sh, m in itertools.product(shapes.values(), (1, 4, 16)):
        x = torch.randn(m, sh.k, device=device, generator=gen).to(torch.bfloat16)
        for vname, (calls, _) in sh.variants(x).items():
            if vname.endswith("_argmax"):
                ours = sh.ours(x, *(sh.q[0] if "int8" in vname else (sh.w[0],)))
                ids = calls[0]().view(m)
                if vname.startswith("cublas"):  # rounds its logits otherwise: its pick is a maximum of ours
                    picked = ours.float().gather(-1, ids.view(m, 1)).squeeze(-1)
                    gap = ours.float().amax(dim=-1) - picked
                    assert torch.all(gap <= 1e-2 * ours.float().abs().amax()), f"{vname} M={m}: gap {gap.max():.2e}"
                else:
                    assert torch.equal(ids, ours.argmax(dim=-1).view(m)), f"{vname} M={m}"
                continue
            err = rel_err(calls[0](), sh.reference(x, "int8" if "int8" in vname else "bf16", vname.startswith("ours")))
            worst[vname] = max(worst.get(vname, 0.0), err)
            assert err < 1e-2, f"{vname} {sh.name} M={m}: rel err {err:.2e}"
    for sh, m in itertools.product((shapes["qkv"], shapes["down"]), (17, 40, 512)):
        x = torch.randn(m, sh.k, device=device, generator=gen).to(torch.bfloat16)
        err = rel_err(w8a16_gemm_tiled(x, *sh.q[0]), sh.reference(x, "int8"))
        worst["ours_int8_tiled"] = max(worst.get("ours_int8_tiled", 0.0), err)
        assert err < 1e-2, f"w8a16 tiled {sh.name} M={m}: rel err {err:.2e}"
    log("correctness (max rel err vs fp32): " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))

    rows = []
    for sh, m in itertools.product(shapes.values(), M_BUCKETS):
        x = torch.randn(m, sh.k, device=device, generator=gen).to(torch.bfloat16)
        for vname, (calls, nbytes) in sh.variants(x).items():
            us = time_us(calls)
            cfg = ""
            if vname.startswith("ours"):
                kind = vname.split("_")[1]
                cfg = json.dumps(gemm_configs.get_config(sh.n, sh.k, m, kind, x.device).as_dict())
            rows.append(dict(meta, shape=sh.name, n=sh.n, k=sh.k, m=m, variant=vname, us=round(us, 3),
                             tb_s=round(nbytes / us / 1e6, 3), bytes=nbytes, config=cfg))
    for m in (64, 512):  # prefill-sized M: the tiled W8A16 kernel against cuBLAS BF16 (for scale)
        sh = shapes["gate_up"]
        x = torch.randn(m, sh.k, device=device, generator=gen).to(torch.bfloat16)
        for vname, calls, nbytes in (
            ("ours_int8_tiled", [lambda q=q: w8a16_gemm_tiled(x, *q) for q in sh.q], sh.bytes_int8),
            ("cublas_bf16", [lambda w=w: F.linear(x, w) for w in sh.w], sh.bytes_bf16),
        ):
            us = time_us(calls)
            rows.append(dict(meta, shape=sh.name, n=sh.n, k=sh.k, m=m, variant=vname, us=round(us, 3),
                             tb_s=round(nbytes / us / 1e6, 3), bytes=nbytes, config=""))
    if args.folds:
        rows += fold_rows(shapes, device, gen, meta, log)
    # One layer = the four linears, summed.
    for m, vname in itertools.product(M_BUCKETS, ("ours_bf16", "ours_int8", "cublas_bf16", "torch_int8_ref")):
        part = [r for r in rows if r["m"] == m and r["variant"] == vname and r["shape"] in LAYER]
        us, nbytes = sum(r["us"] for r in part), sum(r["bytes"] for r in part)
        rows.append(dict(meta, shape="layer", n=0, k=0, m=m, variant=vname, us=round(us, 3),
                         tb_s=round(nbytes / us / 1e6, 3), bytes=nbytes, config=""))

    if args.out:
        with open(args.out / "gemm_h200.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)

    by = {(r["shape"], r["m"], r["variant"]): r for r in rows}
    log(f"\n{'shape':8s} {'M':>3s} | {'ours bf16':>15s} | {'ours int8':>15s} | {'cuBLAS bf16':>15s} | "
        f"{'torch int8 ref':>15s} | int8/cuBLAS")
    for name in list(dims) + ["layer"]:
        for m in M_BUCKETS:
            cells = []
            for v in ("ours_bf16", "ours_int8", "cublas_bf16", "torch_int8_ref"):
                r = by[(name, m, v)]
                cells.append(f"{r['us']:7.1f}µs {r['tb_s']:4.2f}")
            speed = by[(name, m, "cublas_bf16")]["us"] / by[(name, m, "ours_int8")]["us"]
            log(f"{name:8s} {m:3d} | " + " | ".join(cells) + f" | {speed:4.2f}x")
    if "lm_head" in dims:
        log(f"\nLM head with its argmax (µs, TB/s; the plain GEMV above): {'M':>3s} | {'ours bf16':>15s} | "
            f"{'ours int8':>15s} | {'cuBLAS + argmax':>15s}")
        for m in M_BUCKETS:
            cells = [f"{by[('lm_head', m, v)]['us']:7.1f}µs {by[('lm_head', m, v)]['tb_s']:4.2f}"
                     for v in ("ours_bf16_argmax", "ours_int8_argmax", "cublas_bf16_argmax")]
            log(f"{'':52s}{m:3d} | " + " | ".join(cells))
    for m in (64, 512):
        a, b = by[("gate_up", m, "ours_int8_tiled")], by[("gate_up", m, "cublas_bf16")]
        log(f"gate_up M={m}: W8A16 tiled {a['us']:.1f} µs vs cuBLAS bf16 {b['us']:.1f} µs")


if __name__ == "__main__":
    main()

"""What a kernel boundary costs inside a decode step, against a grid-wide barrier inside one persistent
kernel: the measurement that decides whether a persistent decode-step kernel is worth building (one H200
call, ~1 min).

    python3 bench/grid_barrier_bench.py --out DIR [--layers 36] [--model qwen3-4b]

A chain of GEMVs with a Qwen3 shape's four projections per layer (qkv, o, gate_up, down; random bf16
weights, a copy per layer so none stays in L2), each GEMV's x the output of the one before:
- `launches`: one `skinny_gemm` launch per GEMV (the engine's tuned kernel, PDL on), in a CUDA graph;
- `persistent`: one launch for the whole chain, a program per SM, each phase a GEMV whose rows are shared
  out over the programs, phases separated by a grid-wide barrier (an arrival counter and a spin);
- `persistent_nobarrier`: the same without the barriers (wrong results, timed only: the phases' own cost);
- `barriers_only`: the persistent kernel with empty phases: what the barriers alone cost.
Every row gives µs per layer beside the floor (weights' bytes over the read bandwidth measured in the run);
`launches` and `persistent` are checked against torch's product first.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from tileinfer.shapes import QWEN3  # noqa: E402
from tileinfer_profiling.run_info import command_line, run_info  # noqa: E402

SPIN_LIMIT: tl.constexpr = tl.constexpr(1 << 16)  # a barrier that spins this long gives up and flags it: a grid not all resident


@triton.jit
def _grid_barrier(bar_ptr, flag_ptr, target):
    """Wait until `target` arrivals in total have been counted at bar_ptr (this program's included); the
    stores before it are visible to every program after it."""
    tl.debug_barrier()
    tl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")
    seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
    spins = 0
    while (seen < target) & (spins < SPIN_LIMIT):
        seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
        spins += 1
    if spins >= SPIN_LIMIT:
        tl.atomic_max(flag_ptr, 1)
    tl.debug_barrier()


@triton.jit
def _gemv_phase(w_ptr, x_ptr, y_ptr, n_rows, k, pid, programs, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                STAGES: tl.constexpr):
    """y[n] = Σ_k W[n, k] x[k] for this program's row tiles (tile t for t = pid, pid + programs, ...)."""
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_k0 = tl.arange(0, BLOCK_K)
    for tile in range(pid, tl.cdiv(n_rows, BLOCK_N), programs):
        offs_n = tile * BLOCK_N + offs_n0
        n_mask = offs_n < n_rows
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k0 in tl.range(0, k, BLOCK_K, num_stages=STAGES):
            offs_k = k0 + offs_k0
            k_mask = offs_k < k
            w = tl.load(w_ptr + offs_n[:, None] * k + offs_k[None, :], mask=n_mask[:, None] & k_mask[None, :],
                        other=0.0)
            # .cg: x was written by other programs in the phase before; never a stale L1 line
            x = tl.load(x_ptr + offs_k, mask=k_mask, other=0.0, cache_modifier=".cg")
            acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
        tl.store(y_ptr + offs_n, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=n_mask)


@triton.jit
def _chain_kernel(w_ptrs, x_ptrs, y_ptrs, ns, ks, bar_ptr, flag_ptr, phases,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr, BARRIER: tl.constexpr,
                  WORK: tl.constexpr):
    """Phase p: y_p = W_p x_p over all programs, then (BARRIER) a grid-wide barrier. The pointer tables hold
    each phase's W, x, y addresses (int64) and its rows and columns."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    for p in range(phases):
        if WORK:
            w = tl.load(w_ptrs + p).to(tl.pointer_type(tl.bfloat16))
            x = tl.load(x_ptrs + p).to(tl.pointer_type(tl.bfloat16))
            y = tl.load(y_ptrs + p).to(tl.pointer_type(tl.bfloat16))
            _gemv_phase(w, x, y, tl.load(ns + p), tl.load(ks + p), pid, programs, BLOCK_N, BLOCK_K, STAGES)
        if BARRIER:
            _grid_barrier(bar_ptr, flag_ptr, (p + 1) * programs)


def layer_shapes(model: str):
    """(N, K) of the four projections of one layer, in order, each K the N before it (gate_up's output
    feeds down as its first I columns)."""
    s = QWEN3[model.removeprefix("qwen3-")]
    qkv = (s.q_heads + 2 * s.kv_heads) * s.head_dim
    return [(qkv, s.hidden), (s.hidden, s.q_heads * s.head_dim), (2 * s.intermediate, s.hidden),
            (s.hidden, s.intermediate)]


class Chain:
    """A chain of GEMVs over `layers` copies of a layer's (N, K) weights, its activations in ping-pong buffers."""

    def __init__(self, shapes, layers: int, device="cuda"):
        self.shapes = list(shapes) * layers
        self.weights = [torch.randn(n, k, dtype=torch.bfloat16, device=device) * k ** -0.5 for n, k in self.shapes]
        width = max(max(n, k) for n, k in self.shapes)
        self.bufs = [torch.zeros(width, dtype=torch.bfloat16, device=device) for _ in range(2)]
        self.x0 = torch.randn(self.shapes[0][1], dtype=torch.bfloat16, device=device)
        self.bytes = sum(n * k * 2 for n, k in self.shapes)
        self.layers = layers
        # phase p reads bufs[p % 2] and writes bufs[(p + 1) % 2]
        ptr = lambda t: t.data_ptr()  # noqa: E731
        self.tables = [torch.tensor(v, dtype=torch.int64, device=device) for v in (
            [ptr(w) for w in self.weights], [ptr(self.bufs[p % 2]) for p in range(len(self.shapes))],
            [ptr(self.bufs[(p + 1) % 2]) for p in range(len(self.shapes))])]
        self.ns = torch.tensor([n for n, _ in self.shapes], dtype=torch.int32, device=device)
        self.ks = torch.tensor([k for _, k in self.shapes], dtype=torch.int32, device=device)
        self.bar = torch.zeros(1, dtype=torch.int32, device=device)
        self.flag = torch.zeros(1, dtype=torch.int32, device=device)

    def reference(self):
        x = self.x0.float()
        for (n, k), w in zip(self.shapes, self.weights):
            x = (w.float() @ x[:k].bfloat16().float()).bfloat16().float()
        return x

    def start(self):
        self.bufs[0][:self.x0.numel()].copy_(self.x0)
        self.bar.zero_()

    def persistent(self, programs: int, barrier=True, work=True, block_n=16, block_k=512, stages=4, warps=8):
        self.start()
        _chain_kernel[(programs,)](*self.tables, self.ns, self.ks, self.bar, self.flag, len(self.shapes),
                                   BLOCK_N=block_n, BLOCK_K=block_k, STAGES=stages, BARRIER=barrier, WORK=work,
                                   num_warps=warps)
        return self.bufs[len(self.shapes) % 2]

    def launches(self):
        from tileinfer.ops.skinny_gemm import skinny_gemm
        self.start()
        x = self.bufs[0][:self.x0.numel()].view(1, -1)
        for (n, k), w in zip(self.shapes, self.weights):
            x = skinny_gemm(x[:, :k], w)  # gate_up's output feeds down its first I columns, as a view
        return x.view(-1)


def close(got, want, tol=0.05) -> bool:
    """Whether a chain's output matches torch's within `tol` in relative norm: the chain rounds to bf16
    after each GEMV, so over 144 of them the two drift apart by rounding, not by a wrong row."""
    got = got[:want.numel()]
    return bool(((got - want).norm() / want.norm()) < tol)


def graph_us(fn):
    """µs of one call of fn, replayed in CUDA graphs (triton.testing's median; a call reads ~3.6 GB of
    weights, so L2 holds none of them between calls)."""
    from triton.testing import do_bench_cudagraph
    return do_bench_cudagraph(fn, rep=200) * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="qwen3-4b", choices=[f"qwen3-{k}" for k in QWEN3])
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--programs", default="1,2", help="programs per SM for the persistent kernel, comma-separated")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("grid_barrier_bench.py times CUDA kernels: run it on a GPU")
    from bench.ref.metric import gpu_tag, measure_read_bandwidth_gbs, write_rows
    info = {**run_info(), "command": command_line(), "weights_kind": "random", "model": args.model}
    bandwidth = measure_read_bandwidth_gbs()
    chain = Chain(layer_shapes(args.model), args.layers)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    floor_us = chain.bytes / (bandwidth * 1e9) * 1e6
    want = chain.reference()
    rows = []

    def record(variant, us, programs="", ok="", floor=True):
        """`floor`: the variant reads the weights (else its whole time is overhead, barriers only)."""
        over = us - (floor_us if floor else 0.0)
        rows.append(dict(variant=variant, programs=programs, us_per_layer=round(us / args.layers, 2),
                         floor_us_per_layer=round(floor_us / args.layers, 2) if floor else 0.0,
                         over_floor_us_per_layer=round(over / args.layers, 2),
                         us_per_boundary=round(over / len(chain.shapes), 3), correct=ok,
                         layers=args.layers, bandwidth_gbs=round(bandwidth, 1), **info))
        print(rows[-1]["variant"], programs, rows[-1]["us_per_layer"], "µs/layer, floor",
              rows[-1]["floor_us_per_layer"], ok, flush=True)

    from tileinfer.ops import pdl
    pdl.set_enabled(True)
    got = chain.launches().float()
    ok = close(got, want)
    record("launches", graph_us(chain.launches), ok=ok)
    for per_sm in (int(v) for v in args.programs.split(",")):
        programs = per_sm * sms
        chain.flag.zero_()
        got = chain.persistent(programs).float()
        ok = close(got, want) and int(chain.flag) == 0
        record("persistent", graph_us(lambda: chain.persistent(programs)), programs, ok)
        record("persistent_nobarrier", graph_us(lambda: chain.persistent(programs, barrier=False)), programs)
        record("barriers_only", graph_us(lambda: chain.persistent(programs, work=False)), programs, floor=False)
        if int(chain.flag):
            print(f"barrier spun out at {programs} programs: not every program was resident", flush=True)
    os.makedirs(args.out, exist_ok=True)
    path = write_rows(rows, os.path.join(args.out, f"grid_barrier_{gpu_tag(info.get('gpu', ''))}.csv"),
                      last=tuple(info))
    print(f"\n{info.get('gpu')}, rev {info.get('git_rev')}, {args.model} shapes x {args.layers} layers, random "
          f"weights, read bandwidth {bandwidth:.0f} GB/s; {path}")
    print(f"{'variant':22} {'progs':>5} {'µs/layer':>9} {'floor':>7} {'over':>6} {'µs/boundary':>11} ok")
    for r in rows:
        print(f"{r['variant']:22} {r['programs']!s:>5} {r['us_per_layer']:9.2f} {r['floor_us_per_layer']:7.2f} "
              f"{r['over_floor_us_per_layer']:6.2f} {r['us_per_boundary']:11.3f} {r['correct']}")


if __name__ == "__main__":
    main()
